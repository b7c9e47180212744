"""What serves many tables at once, in one place: the compaction DAG files of a long table list and the DAG bundle
that keeps Airflow's parses in step with the table list.

- :mod:`.shards`: which compaction DAG file builds a table's DAGs (a consistent hash of its name), pure.
- :mod:`.dag_files`: the numbered compaction DAG files of a DAG folder, written from the table list.
- :mod:`.handover`: the order in which the DAG files must be parsed when tables move between them, or a DAG is
  paused or unpaused, as a state machine of named states and transitions, pure.
- :mod:`.dag_bundle`: the fleet setting's ``TableListDagBundle``, which reads Airflow's DAG table and the table
  list, drives the hand-over and touches the files it names.

Nothing here imports an operator: the bundle runs in the dag-processor's manager.
"""
