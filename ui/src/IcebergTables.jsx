import { useSearchParams } from "react-router-dom";
import { AllTables } from "./AllTables.jsx";
import { TableDetail } from "./TableDetail.jsx";

// The page: every table, or one table's page when the URL names it (?table=catalog.namespace.table).
export function IcebergTables() {
  const [params, setParams] = useSearchParams();
  const table = params.get("table");
  return table ? <TableDetail table={table} /> : <AllTables params={params} setParams={setParams} />;
}
