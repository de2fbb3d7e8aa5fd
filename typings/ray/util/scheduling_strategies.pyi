class NodeAffinitySchedulingStrategy:
    def __init__(
        self, node_id: str, soft: bool, *, _spill_on_unavailable: bool = False
    ) -> None: ...
