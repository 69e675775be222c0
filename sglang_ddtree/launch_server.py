"""`python -m sglang_ddtree.launch_server` (forwards to sglang_ddtree.sglang.launch_server)."""
from .sglang.launch_server import main

if __name__ == "__main__":
    main()
