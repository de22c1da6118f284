"""`lucid-hub worker`: a delivery process beside `lucid-hub serve` (or several).

Workers form a consumer group on the patch log (Kafka, or the embedded SQL log): a record
says a graph has a new patch, the worker delivers what is due — claiming each subscription
so that no two processes deliver to one callback at once — and commits the log offsets only
after those deliveries are recorded. A killed worker's claims run out and another takes its
subscriptions over from their recorded cursors. Workers read the archive and the policy
graph's patches from the database; they do not open the RDF store (which `serve` holds).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

from lucid_hub.archive import Archive
from lucid_hub.config import Settings
from lucid_hub.db.session import Database
from lucid_hub.delivery.deliverer import Deliverer
from lucid_hub.log import open_log
from lucid_hub.metrics import Metrics, canonicalization_metrics, serve_metrics
from lucid_hub.policy.policy_graph import ArchivePolicies
from lucid_hub.rdf.canon import Canonicalizer
from lucid_hub.supervisor import Supervisor
from lucid_hub.websub import CallbackNotices

log = logging.getLogger(__name__)
GROUP = "lucid-hub-delivery"


# A worker whose main loop has not come round for this long is reported dead (/healthz 503).
LIVENESS_SECONDS = 300.0


def run_worker(settings: Settings, name: str | None = None, stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    db = Database(settings.db_url)
    db.upgrade()
    canonicalizer = Canonicalizer(settings.canon_timeout, settings.canon_memory_mb)
    patch_log = open_log(settings, db)
    metrics = Metrics()
    metrics.watch(lambda: canonicalization_metrics(canonicalizer.failures))
    archive = Archive(db)
    notices = CallbackNotices(settings)
    hub = Deliverer(settings, db, archive, canonicalizer, ArchivePolicies(archive, canonicalizer), deny=notices.deny,
                    worker_id=name, metrics=metrics)
    consumer = patch_log.consumer(GROUP)
    alive = [time.monotonic()]
    listener = (serve_metrics(settings.host, settings.metrics_port, metrics,
                              lambda: time.monotonic() - alive[0] < LIVENESS_SECONDS)
                if settings.metrics_port else None)

    def stopping(signum: int, _frame: Any) -> None:
        stop.set()
        hub.drain()  # the POSTs in flight finish; nothing after them starts

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stopping)
        signal.signal(signal.SIGINT, stopping)
    log.info("delivery worker %s started", hub.worker_id)
    roles = Supervisor()
    hub.start(roles)  # its own rounds: after each recorded batch (backlogs), retries, takeovers
    roles.start()
    metrics.watch(roles.metrics)
    try:
        while not stop.is_set():
            alive[0] = time.monotonic()
            records = consumer.poll(100, 1.0)
            if records:  # new patches: a round now, and the offsets once it is recorded
                hub.wait_for(hub.deliver_due())
                consumer.commit(records)
    finally:
        log.info("delivery worker %s stopping: in-flight deliveries finish and are recorded", hub.worker_id)
        if listener is not None:
            listener.shutdown()
            listener.server_close()
        consumer.close()
        roles.stop()
        hub.stop()
        notices.stop()
        patch_log.close()
        canonicalizer.close()
        db.dispose()

