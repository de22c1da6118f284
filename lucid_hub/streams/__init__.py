"""Streams as Linked Data: each graph's history as a Linked Data Event Stream (ldes), and
Linked Data Notifications inboxes (inbox, sender). docs/streams.md."""
