"""GPTModelProvider.provide_distributed_model on 4 gloo ranks: TP=2 x PP=2 x VPP=2 with sequence parallelism.

One launch checks: the provider initializes the groups itself, one chunk per virtual stage with the right
pre/post stages, the interleaved schedule trains with finite loss and gradients on every chunk, and
bridge's sequence-parallel norm gives the same gradients as without sequence parallelism.
"""

import pytest


@pytest.mark.slow
@pytest.mark.bundled(
    "provider_vpp_sp.py", nproc=4
)  # workers/provider_vpp_sp.py, in the 4-rank bundled launch
def test_provider_tp2_pp2_vpp2_sequence_parallel(bundled):
    out = bundled.case
    assert all(f"rank {r} OK" in out for r in range(4)), out[-4000:]
