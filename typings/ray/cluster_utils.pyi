from ray._private.node import Node

class Cluster:
    address: str
    gcs_address: str
    head_node: Node | None
    worker_nodes: set[Node]
    def __init__(
        self,
        initialize_head: bool = False,
        connect: bool = False,
        head_node_args: dict[str, object] | None = None,
        shutdown_at_exit: bool = True,
    ) -> None: ...
    def add_node(self, wait: bool = True, **node_args: object) -> Node: ...
    def remove_node(self, node: Node, allow_graceful: bool = True) -> None: ...
    def wait_for_nodes(self, timeout: float = 30) -> None: ...
    def shutdown(self) -> None: ...
