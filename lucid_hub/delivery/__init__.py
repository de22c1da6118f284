"""WebSub delivery: subscriptions, verification of intent, and ordered, signed deliveries."""
