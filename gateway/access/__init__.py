"""The front door: who may call the gateway.

`keys.py` holds the tenants' keys (each read from its source, only its digest kept, and the
one lookup from a presented key to its tenant); `front_door.py` holds `FrontDoor`, what a
request must present (the tenants' keys, else the token, else nothing) and which models its
tenant may call. It knows no TOML, no front end and no scheduler: the config declares the
tenants, the front ends and the service ask the door.
"""
