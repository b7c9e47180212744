-- The two databases the stack keeps in MySQL: the write gates, and the Iceberg JDBC catalog.
CREATE DATABASE IF NOT EXISTS airflow_iceberg;
CREATE DATABASE IF NOT EXISTS iceberg_catalog;
GRANT ALL ON airflow_iceberg.* TO 'iceberg'@'%';
GRANT ALL ON iceberg_catalog.* TO 'iceberg'@'%';
