"""Export an agent: one self-contained, versioned file that plays without its run.

    python -m experiments.export runs/kuhn:any_main_agent_0 --out=kuhn.agent.npz
    python -c "import agents; print(agents.load_policy('kuhn.agent.npz'))"
    python -m experiments.nashconv --params=kuhn.agent.npz        # poker: its exact NashConv

AGENT is any name of `experiments.agent_ref`: RUN_DIR:PLAYER_ID (a learning agent's latest
parameters or a frozen snapshot) or an exported file (written again in this version's format).
The file (agents/exported.py) holds the parameters, the network's description (class and
config), the game's name and spec, and where the agent came from (run, player, parameter
version, date); npz with a JSON header and a checksum, no pickle. A wrong name, a damaged file or
a game not exportable yet: a message and exit 2, nothing written.

RUN_DIR:result writes the run's agent: on poker the league's Nash mixture (the header lists its
members, player, version and role, with their weights and each member's parameters); on
other games the main agent's average with its newest snapshots (`agent_ref.result_params`; the
header's `source.reading` says "average of final + N newest snapshots", `source.averaged` names
them), RUN_DIR:result:RACE on SMAX (a game with races), whose agents export as any other:

    python -m experiments.export runs/smax:result:terran --out=terran.agent.npz
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import sys

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("out", None, "the file to write (e.g. kuhn.agent.npz); an existing one is replaced")


class ExportError(ValueError):
    """An agent that cannot be exported (yet)."""


def header(agent) -> dict:
    """The file's description of `agent` (`experiments.agent_ref.Agent`)."""
    from actors.games import registry
    from agents import exported

    if agent.policy is not None:   # an exported file written again: its description as it was
        described = {k: v for k, v in agent.policy.header.items() if k not in ("format", "format_version", "leaves")}
        if exported.MIXTURE in described:
            described[exported.MIXTURE] = [{k: v for k, v in m.items() if k != "leaves"}
                                           for m in described[exported.MIXTURE]]
        return described
    try:
        version = importlib.metadata.version("league")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    source = {**agent.source,
              "exported_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "exported_by": f"league {version}"}
    try:
        network = exported.network_to_dict(agent.network)
    except ValueError as e:
        raise ExportError(f"{agent.name}: {e}") from None
    out = {"network": network, "side": agent.side,
           "spec": exported.spec_to_dict(agent.spec),
           "game": {"name": agent.game, "module_path": registry.module_path(agent.game)},
           "source": source}
    if agent.weights:   # a mixture (RUN_DIR:result on poker): its members and their weights
        out[exported.MIXTURE] = [{"weight": float(w), "source": member}
                                 for w, member in zip(agent.weights, agent.members)]
    return out


def export(name: str, out: str) -> str:
    """Writes the agent `name` names to `out`; returns a line saying what was written.
    AgentNameError / ExportError (nothing written) otherwise."""
    from agents import exported
    from experiments import agent_ref

    agent = agent_ref.resolve(name)
    description = header(agent)
    exported.write(out, agent.params, description)
    try:
        exported.load_policy(out)   # what was written reads back
    except exported.ExportedFileError:
        os.remove(out)
        raise
    source = description["source"]
    who = f"{source.get('player_id', '?')} of {source.get('run_dir', '?')}, parameter version {source.get('version', '?')}"
    if source.get("reading"):   # RUN_DIR:result of a game without an exact meta-game
        who = (f"the run's agent of {source.get('run_dir', '?')}: {source.get('main_agent', '?')}"
               f"{' (' + source['race'] + ')' if source.get('race') not in (None, 'any') else ''}, "
               f"{source['reading']}, its final parameters version {source.get('version', '?')}")
    if description.get(exported.MIXTURE):
        who = (f"the Nash mixture of {source.get('run_dir', '?')}: " + ", ".join(
            f"{m['weight']:.3f} {m['source'].get('player_id', '?')}" for m in description[exported.MIXTURE]))
    return f"wrote {out} ({os.path.getsize(out):,} bytes): {description['game']['name']}, {who}"


def cli(args: list[str], out: str | None) -> int:
    """The command: 0 written, 2 (a message on stderr, nothing written) otherwise."""
    from agents.exported import ExportedFileError
    from experiments.agent_ref import AgentNameError, describe_forms

    if len(args) != 1:
        print(f"error: name one agent to export: {describe_forms()} (got {len(args)})", file=sys.stderr)
        return 2
    if not out:
        print("error: --out=FILE is required (the exported agent's file)", file=sys.stderr)
        return 2
    try:
        print(export(args[0], out))
    except (AgentNameError, ExportError, ExportedFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv):
    from experiments.nashconv import quiet_backend_probe

    quiet_backend_probe()
    return cli(argv[1:], FLAGS.out)


if __name__ == "__main__":
    define_flags()
    app.run(lambda argv: sys.exit(main(argv)))
