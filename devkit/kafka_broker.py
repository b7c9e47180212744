"""A Kafka broker of a test's own: one KRaft node (broker and controller), from Maven Central's Kafka jars.

``make setup`` resolves the broker's jars (``requirements/kafka-broker.xml``) and writes their class path to
``build/kafka/classpath``. :class:`KafkaBroker` formats a log directory under ``base_dir`` with Kafka's
``StorageTool`` and runs ``kafka.Kafka`` on two free loopback ports (clients, controller) in a process group of
its own, and is ready once an admin client lists its topics. Its log goes to ``base_dir/broker.log``.

Clean-up: :meth:`~KafkaBroker.close` (or leaving the ``with`` block) stops the broker and removes its log
directory; a broker still running when the interpreter exits is killed then.

Typical use::

    with KafkaBroker(tmp_path / "kafka") as kafka:
        kafka.create_topic("changes", partitions=2)
        producer = kafka.producer()
        producer.produce("changes", key=b"1", value=b"0,u,1,a")
        producer.flush()
"""

from __future__ import annotations

import base64
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
import weakref
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from devkit import extra_jvm_options
from devkit.jvm_service import stop_group
from devkit.live_airflow import free_port

KAFKA_BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_KAFKA_BUILD", Path(__file__).parents[1] / "build" / "kafka"))

#: librdkafka's own log lines, through Python logging (pytest shows them with a failing test) rather than stderr.
_CLIENT_LOG = logging.getLogger("devkit.kafka_client")

_LOG4J = """\
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{ISO8601}} %p %c{{1}}: %m%n
"""


class KafkaBrokerError(RuntimeError):
    """The broker could not be formatted or started; the message holds its log's tail."""


def _kill_at_exit(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


class KafkaBroker:
    """One KRaft broker under ``base_dir`` (created), listening on 127.0.0.1 only."""

    def __init__(self, base_dir: Path, *, heap: str = "512m") -> None:
        classpath = KAFKA_BUILD / "classpath"
        if not classpath.is_file():
            raise KafkaBrokerError(f"the Kafka broker's jars are not resolved ({classpath} is missing): `make setup`")
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.log_file = self.base_dir / "broker.log"
        self._classpath = classpath.read_text().strip()
        self._heap = heap
        self._data = self.base_dir / "data"
        self._config = self.base_dir / "server.properties"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _java(self, main: str, *args: str) -> list[str]:
        return [
            "java",
            f"-Xmx{self._heap}",
            *extra_jvm_options(),
            f"-Dlog4j2.configurationFile={self.base_dir / 'log4j2.properties'}",
            "-cp",
            self._classpath,
            main,
            *args,
        ]

    def start(self, timeout: float = 60) -> None:
        """Format the log directory (on a first start) and run the broker until it answers."""
        if not self._data.exists():
            self._config.write_text(
                "\n".join(
                    [
                        "process.roles=broker,controller",
                        "node.id=1",
                        f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                        f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                        f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                        "controller.listener.names=CONTROLLER",
                        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                        f"log.dirs={self._data}",
                        "offsets.topic.replication.factor=1",
                        "transaction.state.log.replication.factor=1",
                        "transaction.state.log.min.isr=1",
                        "share.coordinator.state.topic.replication.factor=1",
                        "group.initial.rebalance.delay.ms=0",
                        "auto.create.topics.enable=false",
                    ]
                )
                + "\n"
            )
            (self.base_dir / "log4j2.properties").write_text(_LOG4J.format(log=self.log_file))
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            # "=": a URL-safe base64 id may begin with "-", which argparse would take for an option
            options = [f"--cluster-id={cluster_id}", f"--config={self._config}"]
            command = self._java("kafka.tools.StorageTool", "format", *options)
            formatted = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if formatted.returncode != 0:
                raise KafkaBrokerError(f"kafka-storage format failed:\n{formatted.stdout}{formatted.stderr}")
        with (self.base_dir / "broker.out").open("a") as out:
            self._process = subprocess.Popen(
                self._java("kafka.Kafka", str(self._config)),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        weakref.finalize(self, _kill_at_exit, self._process)
        deadline = time.monotonic() + timeout
        while True:  # its port first (a client would log each refused connection), then a metadata request
            if self._process.poll() is not None:
                raise KafkaBrokerError(f"the Kafka broker exited ({self._process.returncode}):\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                self.admin().list_topics(timeout=5)
                return
            except (OSError, KafkaException) as error:
                if time.monotonic() > deadline:
                    tail = self.log_tail()
                    raise KafkaBrokerError(f"the Kafka broker did not answer within {timeout} s:\n{tail}") from error
                time.sleep(0.2)

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "logger": _CLIENT_LOG})

    def producer(self, **config: object) -> Producer:
        """A producer that keeps each partition's order through retries (idempotent), acknowledged by the broker."""
        settings = {"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5}
        return Producer({**settings, "logger": _CLIENT_LOG, **config})

    def create_topic(self, name: str, *, partitions: int = 1) -> None:
        admin = self.admin()  # referenced until the result is in: a destroyed client fails its futures
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(timeout=30)

    def log_tail(self, chars: int = 5000) -> str:
        logs = (self.base_dir / "broker.out", self.log_file)
        return "".join(path.read_text(errors="replace") for path in logs if path.exists())[-chars:]

    def stop(self) -> None:
        """Stop the broker (SIGTERM, a controlled shutdown); kill it if it has not ended within 30 s."""
        stop_group(self._process)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._data, ignore_errors=True)
