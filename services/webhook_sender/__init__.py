"""The webhook-sender: tells users' webhooks about sealed snapshots and sealed or failed crawls."""
