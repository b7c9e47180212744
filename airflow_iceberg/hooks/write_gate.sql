-- The write gate's tables, in the MySQL (or MariaDB) database of the `iceberg_write_gate` connection.
--
-- `airflow-iceberg migrate` (which `make setup` runs) applies this file: first the statements before the first
-- version, every time (they are idempotent); then, in order, each version newer than the last one recorded in
-- iceberg_write_gate_schema, recording each as it completes. A new database goes through every version, so it
-- ends exactly where an upgraded one does. To change the schema, append a version; never edit a released one.
-- MySQL commits each DDL statement on its own, so keep a version safe to run again after it stopped half-way.
-- Statements end with a semicolon at the end of a line. Writers read iceberg_write_gate only.

CREATE TABLE IF NOT EXISTS iceberg_write_gate_schema (
    version    INT          NOT NULL PRIMARY KEY,
    summary    VARCHAR(200) NOT NULL,
    applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 1: one gate row per table, and the audit trail of every close and open
CREATE TABLE IF NOT EXISTS iceberg_write_gate (
    table_name       VARCHAR(400) NOT NULL PRIMARY KEY COMMENT 'catalog.namespace.table',
    state            VARCHAR(8)   NOT NULL DEFAULT 'open',
    owner_dag_id     VARCHAR(250) NULL COMMENT 'the DAG run holding the gate',
    owner_run_id     VARCHAR(250) NULL,
    closed_at        TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'database clock, as every time here',
    lease_expires_at TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'writers pause while closed and before this',
    opened_at        TIMESTAMP(6) NULL DEFAULT NULL,
    CONSTRAINT iceberg_write_gate_state CHECK (state IN ('open', 'closed'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS iceberg_write_gate_audit (
    id               BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    table_name       VARCHAR(400)  NOT NULL,
    action           VARCHAR(16)   NOT NULL COMMENT 'close, reclose, close_refused, open, open_noop, force_open',
    owner_dag_id     VARCHAR(250)  NULL COMMENT 'the run that acted; for force_open, the run that held the gate',
    owner_run_id     VARCHAR(250)  NULL,
    at               TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    lease_expires_at TIMESTAMP(6)  NULL DEFAULT NULL,
    detail           VARCHAR(1000) NULL,
    KEY iceberg_write_gate_audit_table_at (table_name, at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 2: a paused writer acknowledges, with its last committed snapshot
ALTER TABLE iceberg_write_gate
    ADD COLUMN writer_ack_at TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when the writer acknowledged the pause',
    ADD COLUMN writer_ack_snapshot_id BIGINT NULL COMMENT 'the writer''s last committed snapshot at that moment';

-- version 3: several writers per table, each registering and acknowledging on its own; renewed, capped leases
CREATE TABLE IF NOT EXISTS iceberg_write_gate_writer (
    table_name      VARCHAR(400) NOT NULL COMMENT 'catalog.namespace.table',
    writer_id       VARCHAR(200) NOT NULL COMMENT 'chosen by the writer; keep it across restarts',
    seen_at         TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'the writer last read the gate; NULL once it left',
    ack_at          TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when it acknowledged a pause',
    ack_snapshot_id BIGINT       NULL COMMENT 'its last committed snapshot at that moment',
    PRIMARY KEY (table_name, writer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

ALTER TABLE iceberg_write_gate
    ADD COLUMN lease_seconds  INT          NULL COMMENT 'the holder''s lease; each renewal extends it by this much',
    ADD COLUMN pause_deadline TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'no renewal extends the lease past this';

-- version 4: a record of every compaction run, skipped ones included (written by Airflow, never by writers)
CREATE TABLE IF NOT EXISTS iceberg_compaction_run (
    id                   BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    table_name           VARCHAR(400)  NOT NULL COMMENT 'catalog.namespace.table',
    dag_id               VARCHAR(250)  NOT NULL,
    run_id               VARCHAR(250)  NOT NULL,
    decision             VARCHAR(16)   NOT NULL COMMENT 'skip, compact, force, full, or none (failed before planning)',
    reason               VARCHAR(1000) NOT NULL,
    partitions           TEXT          NULL COMMENT 'JSON: procedure -> partitions it rewrote',
    data_files_before    INT           NULL,
    delete_files_before  INT           NULL,
    bytes_before         BIGINT        NULL,
    data_files_after     INT           NULL,
    delete_files_after   INT           NULL,
    bytes_after          BIGINT        NULL,
    health_score         INT           NULL COMMENT 'small plus delete files in the partitions needing work',
    gate_closed_seconds  DOUBLE        NULL,
    rewrite_seconds      DOUBLE        NULL,
    outcome              VARCHAR(16)   NOT NULL COMMENT 'skipped, dry_run, running, success or failed',
    detail               VARCHAR(1000) NULL,
    started_at           TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    finished_at          TIMESTAMP(6)  NULL DEFAULT NULL,
    UNIQUE KEY iceberg_compaction_run_dag_run (dag_id, run_id),
    KEY iceberg_compaction_run_table_started (table_name, started_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 5: at most N tables of one Spark connection paused at once, the worst first (spark_slots)
CREATE TABLE IF NOT EXISTS iceberg_spark_conn (
    spark_conn_id VARCHAR(250) NOT NULL PRIMARY KEY COMMENT 'its row lock serializes who gets a slot'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE IF NOT EXISTS iceberg_spark_queue (
    table_name    VARCHAR(400) NOT NULL PRIMARY KEY COMMENT 'catalog.namespace.table',
    spark_conn_id VARCHAR(250) NOT NULL,
    owner_dag_id  VARCHAR(250) NOT NULL COMMENT 'the run asking for a slot, or holding one',
    owner_run_id  VARCHAR(250) NOT NULL,
    score         BIGINT       NOT NULL COMMENT 'its plan''s health score: the highest goes first',
    queued_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'among equal scores, the earliest',
    expires_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'a waiter that stops asking loses its place',
    admitted_at   TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'got a slot: holds it while its run holds the gate',
    KEY iceberg_spark_queue_conn (spark_conn_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 6: what the health watch last decided for each table (written by the triggerer, never by writers)
CREATE TABLE IF NOT EXISTS iceberg_health_check (
    table_name  VARCHAR(400)  NOT NULL PRIMARY KEY COMMENT 'catalog.namespace.table',
    checked_at  TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'the sweep that last looked at it',
    snapshot_id BIGINT        NULL COMMENT 'its current snapshot then',
    decision    VARCHAR(16)   NOT NULL COMMENT 'healthy, needs_work, started, waiting, unreachable or error',
    reason      VARCHAR(1000) NOT NULL,
    reading     VARCHAR(16)   NOT NULL COMMENT 'what the check read: listing, metadata or manifests',
    started_at  TIMESTAMP(6)  NULL DEFAULT NULL COMMENT 'when the watch last started a run for it'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 7: the check's figures, so that the UI lists the tables by need without reading any table's metadata
ALTER TABLE iceberg_health_check
    ADD COLUMN score        BIGINT NULL COMMENT 'small plus delete files in the partitions needing work, when read',
    ADD COLUMN data_files   BIGINT NULL COMMENT 'data files of its current snapshot (the snapshot summary''s total)',
    ADD COLUMN delete_files BIGINT NULL COMMENT 'delete files of its current snapshot (the snapshot summary''s total)';

-- version 8: a writer in the middle of a long write (a batch DELETE, a MERGE) says so, so no compaction starts under it
ALTER TABLE iceberg_write_gate_writer
    ADD COLUMN busy_until TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'writing until then, unless renewed; NULL between writes';

-- version 9: writers say what they commit, and a closing pauses only the writers that can conflict with its work
ALTER TABLE iceberg_write_gate_writer
    ADD COLUMN commit_kind          VARCHAR(16)   NULL COMMENT 'appends, upserts or row-level, as the writer declared; NULL: nothing, so it pauses',
    ADD COLUMN iceberg_version      VARCHAR(32)   NULL COMMENT 'the Iceberg release it commits with, as it said',
    ADD COLUMN commits_as           VARCHAR(250)  NULL COMMENT 'key=value that its snapshots'' summaries carry: flink.job-id=..., spark.app.id=...',
    ADD COLUMN observed_kind        VARCHAR(16)   NULL COMMENT 'wider than it declared, as the table''s history showed (written by Airflow)',
    ADD COLUMN observed_snapshot_id BIGINT        NULL COMMENT 'the snapshot that showed it',
    ADD COLUMN observed_detail      VARCHAR(1000) NULL COMMENT 'what that snapshot did',
    ADD COLUMN exempt_closed_at     TIMESTAMP(6)  NULL DEFAULT NULL COMMENT 'it keeps committing through the closing of that time (written by Airflow)',
    ADD COLUMN pause_reason         VARCHAR(1000) NULL COMMENT 'why the last closing paused it, or did not (written by Airflow)',
    ADD CONSTRAINT iceberg_write_gate_writer_kind CHECK (commit_kind IN ('appends', 'upserts', 'row-level')),
    ADD CONSTRAINT iceberg_write_gate_writer_observed CHECK (observed_kind IN ('appends', 'upserts', 'row-level'));

ALTER TABLE iceberg_write_gate
    ADD COLUMN history_checked_ms BIGINT NULL COMMENT 'the newest snapshot (epoch ms) whose writer a plan has checked';

ALTER TABLE iceberg_compaction_run
    ADD COLUMN writers TEXT NULL COMMENT 'JSON: each writer, whether the run paused it, and why';

-- version 10: a run's rewrite starts its Spark application before the gate closes, and begins at the idle wait's go
CREATE TABLE IF NOT EXISTS iceberg_gate_work (
    table_name   VARCHAR(400)  NOT NULL COMMENT 'catalog.namespace.table',
    owner_dag_id VARCHAR(250)  NOT NULL COMMENT 'the run whose work it is',
    owner_run_id VARCHAR(250)  NOT NULL,
    attempt      INT           NOT NULL COMMENT 'the run''s clear number: a cleared run starts anew',
    ready_at     TIMESTAMP(6)  NULL DEFAULT NULL COMMENT 'the work (a Spark application) is up, waiting for the go',
    seen_at      TIMESTAMP(6)  NULL DEFAULT NULL COMMENT 'it last said it is alive; the gate closes only for live work',
    go_at        TIMESTAMP(6)  NULL DEFAULT NULL COMMENT 'the writers that must pause are done: the work may begin',
    stop_reason  VARCHAR(1000) NULL COMMENT 'the run gave up before the go: the work ends without working',
    PRIMARY KEY (owner_dag_id, owner_run_id, attempt)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

-- version 11: the Spark job's report, so that its answers reach Airflow in cluster deploy mode too
CREATE TABLE IF NOT EXISTS iceberg_gate_job_report (
    report_id  CHAR(32)      NOT NULL COMMENT 'one submit of a rewrite: the task gives it, the job writes under it',
    seq        INT           NOT NULL COMMENT 'the lines in the order the job said them',
    line       TEXT          NOT NULL COMMENT 'a result row or a marker, as the job also prints it',
    written_at TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (report_id, seq),
    KEY iceberg_gate_job_report_written (written_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
