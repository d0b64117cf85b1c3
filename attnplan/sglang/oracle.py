"""The old name of the SGLang oracle, now ``attnplan.oracle.sglang`` (dev tooling, left out of the wheel with the rest
of attnplan/oracle/: issue 36 item 6). This name stays while tests/test_sglang.py and tests/test_sglang_releases.py
import it; it is the same module object, so its private helpers (``_run_case``, ``_sglang``) are reached too."""

import sys

if __name__ == "__main__":   # python -m attnplan.sglang.oracle
    from attnplan.oracle.sglang import main

    sys.exit(main())
else:
    from attnplan.oracle import sglang as _oracle

    sys.modules[__name__] = _oracle
