"""Event-condition-action rules on the patch stream (docs/rules.md)."""
