"""Datasets as token shards: data/shards.py holds the format and the loader; each data/<name>/prepare.py
makes the shards of one dataset in data/<name>/."""
