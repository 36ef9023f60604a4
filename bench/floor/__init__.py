"""The floor: the least a Django app can do per ingest (one INSERT), served like the real app."""
