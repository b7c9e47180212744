// The Airflow UI import()s this script, then renders globalThis.AirflowPlugin as the page of the route
// /plugin/iceberg-tables (see airflow_iceberg/plugins/tables_page.py).
import { IcebergTables } from "./IcebergTables.jsx";

globalThis.AirflowPlugin = IcebergTables;
