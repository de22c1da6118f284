"""The file to hand to spark-submit to publish a snapshot to a running hub (the chart's
SparkApplication runs it): `spark-submit … lucid_hub/commands/spark_publish.py FILE --graph G --hub URL`.

The Spark master and settings are spark-submit's (the Spark operator's); the hub's client
credentials come from LUCID_CLIENT_ID / LUCID_CLIENT_SECRET (or LUCID_ACCESS_TOKEN). A
separate launcher, as spark_job.py: the job's functions must be importable by executors.
"""

from lucid_hub.commands.publish_file import spark_publish_main

raise SystemExit(spark_publish_main())
