import { useSearchParams } from "react-router-dom";
import { FleetList } from "./FleetList.jsx";
import { TableDetail } from "./TableDetail.jsx";

// The page: the fleet, or one table's page when the URL names it (?table=catalog.namespace.table).
export function IcebergTables() {
  const [params, setParams] = useSearchParams();
  const table = params.get("table");
  return table ? <TableDetail table={table} /> : <FleetList params={params} setParams={setParams} />;
}
