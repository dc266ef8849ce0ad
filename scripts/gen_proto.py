"""Regenerate proto/txnsim_pb2*.py from proto/txnsim.proto; `--check` fails if they are stale.

Run from anywhere: python scripts/gen_proto.py [--check]
The generated modules import each other as `proto.txnsim_pb2`, so the repository root is
the include path.
"""
from __future__ import annotations

import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ("txnsim_pb2.py", "txnsim_pb2.pyi", "txnsim_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    args = [
        "protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(ROOT / "proto" / "txnsim.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> int:
    if "--check" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            stale = [n for n in GENERATED
                     if not filecmp.cmp(Path(tmp) / "proto" / n, ROOT / "proto" / n, shallow=False)]
        if stale:
            print(f"generated code is stale: {', '.join(stale)}; run python scripts/gen_proto.py")
            return 1
        print("generated proto code is up to date")
        return 0
    generate(ROOT)
    print("regenerated", ", ".join(f"proto/{n}" for n in GENERATED))
    return 0


if __name__ == "__main__":
    sys.exit(main())
