"""Which ranks echo the logging rank's lines on a multi-node run (torchrun numbers ranks node by node)."""

from __future__ import annotations

import pytest

from bridge.parallel.ranks import node_echo_ranks


@pytest.mark.parametrize(
    "world, local_world, printing, echo",
    [
        (8, 8, 7, set()),  # one node: the logging rank's own log is the node's
        (16, 8, 15, {0}),  # two nodes, the last rank logs: node 0's first rank echoes
        (32, 8, 31, {0, 8, 16}),
        (2, 1, 1, {0}),  # two single-rank nodes
        (16, 8, 3, {8}),  # a logging rank on node 0: node 1 echoes
        (12, 8, 11, set()),  # not whole nodes (torchrun gives every node the same count): no guess
    ],
)
def test_node_echo_ranks(world, local_world, printing, echo):
    assert node_echo_ranks(world, local_world, printing) == echo
