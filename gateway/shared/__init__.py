"""The store the tenants' quotas are held in across gateway replicas (`[shared]`): the
store's client and its fallbacks (`store.py`) and the scripts it runs in Redis
(`scripts.py`). The scheduler reaches it through `gateway.batching.quotas`; it knows no
front end.
"""
