"""The gateway's own protobuf descriptor pool, which the generated stubs register into.

Why not protobuf's default pool: tritonclient and kserve register their own copies of the
`inference` protos there, and two definitions of one symbol in one pool fail at import.
Keeping ours apart lets the gateway run in the same process as those clients. Server
reflection is served from this pool, so it also holds the health and reflection services.
"""
from google.protobuf import descriptor_pool
from google.protobuf.descriptor import FileDescriptor

POOL = descriptor_pool.DescriptorPool()


def add_file(file: FileDescriptor) -> None:
    """Add a file (and, first, its dependencies) from another pool, once."""
    try:
        POOL.FindFileByName(file.name)
        return
    except KeyError:
        pass
    for dependency in file.dependencies:
        add_file(dependency)
    POOL.AddSerializedFile(file.serialized_pb)
