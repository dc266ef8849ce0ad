"""What the web view and `txnsim transactions timeline` show, built from a cluster's durable files."""
