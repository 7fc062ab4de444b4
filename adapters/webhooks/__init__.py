"""The sending side of webhooks: one signed POST to a receiver (service/webhooks/)."""
