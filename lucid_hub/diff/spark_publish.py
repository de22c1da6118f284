"""Forwarding launcher: the Spark bulk publish moved to `lucid_hub/commands/spark_publish.py`
(a command opens a hub's client; the diff engines know nothing of publishing). This file is
kept so that a SparkApplication whose values still name it goes on working; spark-submit
runs it, nothing imports it."""

import runpy

runpy.run_module("lucid_hub.commands.spark_publish", run_name="__main__")
