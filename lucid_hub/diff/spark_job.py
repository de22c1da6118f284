"""The file to hand to spark-submit: `spark-submit … lucid_hub/diff/spark_job.py OLD NEW [--graph G] [--out DIR]`.

A separate launcher, because the job module must not run as __main__: its worker functions
are pickled by reference to `lucid_hub.diff.spark`, which executors import.
"""

from lucid_hub.diff.spark import main

raise SystemExit(main())
