"""The self-check's EFA count against real `fi_info -p efa` output (issue 11 rehearsal finding).

libfabric lists utility providers layered on efa under `-p efa` ("provider: efa;ofi_rxd" over
the efa_0-dgrm domain, type FI_EP_RDM: tests/validate/fixtures/fi_info_f12_efa.txt, captured
in ofiwg/libfabric#5689 on a one-EFA instance). Counting every RDM domain made a healthy
one-EFA node report 2 devices and fail its self-check; the first boot rehearsal showed it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuforge.components.userdata import stack_user_data
from gpuforge.core.config import parse_stack_config
from gpuforge.stackfile import load_stack_config
from tests.bootstrap.conftest import PROJECT

CAPTURE = PROJECT / "tests/validate/fixtures/fi_info_f12_efa.txt"
# fi_info's -t filter over the captured blocks (as libfabric filters by endpoint type).
FI_INFO = f"""#!/usr/bin/python3
import sys
text = open({str(CAPTURE)!r}).read()
want = sys.argv[sys.argv.index("-t") + 1] if "-t" in sys.argv else None
for block in ["provider:" + b for b in text.split("provider:")[1:]]:
    if want is None or f"type: {{want}}\\n" in block:
        sys.stdout.write(block)
"""


def test_one_efa_device_counts_as_one(tmp_path: Path) -> None:
    raw, _ = load_stack_config(PROJECT, "risk-sim")
    cfg = parse_stack_config(raw, "risk-sim")  # p3dn.24xlarge: one EFA interface, as the capture
    assert cfg.instance.efa_interfaces == 1
    script = stack_user_data(cfg, "risk-1").files["opt/gpuforge/phases/self-check.sh"]
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("nefa="))
    end = next(i for i in range(start, len(lines)) if not lines[i].rstrip().endswith("|"))
    snippet = "\n".join(lines[start : end + 1])
    fake = tmp_path / "usr/local/bin/fi_info"
    fake.parent.mkdir(parents=True)
    fake.write_text(FI_INFO)
    fake.chmod(0o755)
    out = subprocess.run(["bash", "-c", f"set -euo pipefail; R={tmp_path}; {snippet}\necho $nefa"],
                         capture_output=True, text=True, timeout=30, check=True)  # fmt: skip
    assert out.stdout.strip() == "1", out
