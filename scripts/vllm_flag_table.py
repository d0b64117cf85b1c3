"""Write vLLM's `vllm serve` flag table (attnplan/vllm/args.py extract_flag_table) for the installed vLLM to
attnplan/vllm/tables/vllm-<version>-flags.json: the wheel reads a line with it where vLLM is not installed
(every flag vLLM takes is accepted; those that do not change attention are listed as ignored).

    python scripts/vllm_flag_table.py          # needs vllm installed (make setup installs 0.33.0 --no-deps)
    python scripts/vllm_flag_table.py --check  # exit 1 when the shipped table is not the installed vLLM's
"""

from __future__ import annotations

import json
import os
import sys

from attnplan.vllm.args import SHIPPED_TABLES, _vllm_parser, extract_flag_table


def main() -> int:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # parsing only: no GPU platform needed
    table = extract_flag_table(_vllm_parser())
    table.pop("attnplan", None)  # keyed by vLLM's version alone: the flags are vLLM's
    out = SHIPPED_TABLES / f"vllm-{table['vllm']}-flags.json"
    text = json.dumps(table, indent=0, sort_keys=True) + "\n"
    if "--check" in sys.argv[1:]:
        same = out.is_file() and json.loads(out.read_text(encoding="utf-8")) == json.loads(text)
        print(f"{out}: {'the installed vLLM' + chr(39) + 's' if same else 'STALE: not the installed vLLM' + chr(39) + 's'} "
              f"({len(table['actions'])} flags)")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(table['actions'])} flags)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
