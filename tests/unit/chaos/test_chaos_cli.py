"""`txnsim chaos` is registered and parses its options."""
from __future__ import annotations

import pytest

from txnsim.cli.main import build_parser


def test_chaos_is_a_txnsim_command_with_the_issue_options():
    args = build_parser().parse_args(["chaos", "--duration", "5", "--seed", "9", "--faults", "kill,pause,restart",
                                      "--fault-interval-ms", "500", "--abort-ratio", "0.3", "--nodes", "3"])
    assert (args.duration, args.seed, args.faults) == (5.0, 9, ("kill", "pause", "restart"))
    assert (args.fault_interval_ms, args.abort_ratio, args.nodes) == (500, 0.3, 3)


def test_chaos_defaults_and_no_faults():
    args = build_parser().parse_args(["chaos"])
    assert (args.duration, args.seed, args.faults, args.abort_ratio) == (60.0, None, ("kill", "pause"), 0.1)
    assert build_parser().parse_args(["chaos", "--faults", "none"]).faults == ()


@pytest.mark.parametrize("argv", [["chaos", "--faults", "kill,split-brain"], ["chaos", "--abort-ratio", "1.5"]])
def test_chaos_refuses_bad_options(argv, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "error" in capsys.readouterr().err


def test_network_faults_need_hosts_of_their_own_and_unclean_election_needs_replicas():
    from proto.errors import KafkaConfigurationError
    from txnsim.chaos.runner import ChaosConfig
    with pytest.raises(KafkaConfigurationError, match="--namespaces"):
        ChaosConfig(faults=("kill", "partition")).validate()
    with pytest.raises(KafkaConfigurationError, match="replicated"):
        ChaosConfig(unclean_leader_election=True).validate()
    ChaosConfig(faults=("partition", "zookeeper"), namespaces=True, unclean_leader_election=True).validate()
