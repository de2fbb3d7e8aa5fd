import subprocess

from ray._private.parameter import RayParams

class ProcessInfo:
    process: subprocess.Popen[bytes]

class Node:
    node_id: str
    all_processes: dict[str, list[ProcessInfo]]
    def __init__(
        self,
        ray_params: RayParams,
        head: bool = False,
        shutdown_at_exit: bool = True,
        spawn_reaper: bool = True,
        connect_only: bool = False,
    ) -> None: ...
    def kill_all_processes(
        self, check_alive: bool = True, allow_graceful: bool = False
    ) -> None: ...
