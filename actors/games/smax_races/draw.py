"""A SMAX races battle drawn for a person watching it (`Capabilities.draw`; the dashboard's watch
page, `experiments.watch`): one SVG frame per step, `frames(functions, states, actions, outcome)`
(the protocol of docs/games.md, `draw`).

- The caption names the armies picked (each side's race and army from the menu, with its units)
  and the step, the units alive and, at the end, who won.
- The map (`map_width` x `map_height`, y up) holds every living unit at its position: coloured
  by side (side 0 blue, side 1 red), its shape and letter by unit type, its size the type's
  radius, and a health bar above it; a dead unit is a small grey cross where it fell.
- An attack ordered this step is a line from the attacker to its target (solid where the target
  is in the attacker's range, faint where it must walk there first).
- The strategy step (step 0, where both sides pick their armies) has no units yet: its frame
  shows the picks. The last frame is the battle after its last step (the state the game's step
  reached before it reset for the next game).
"""

from __future__ import annotations

from xml.sax.saxutils import escape

import jax
import jax.numpy as jnp
import numpy as np

from actors.games.smax_races.game import ATTACK, COMPOSITION_HEAD, RACES, UNIT_TYPES

MAP_WIDTH, MAP_HEIGHT = 640, 400   # pixels: the part of the map the battle covers, 16:10
MARGIN = 2.0                       # map units around the units' positions over the whole game
MIN_SPAN = 12.0                    # map units: the narrowest view (a small battle is not blown up)
TOP = 96                           # the caption's height above the map
SIDE_COLOURS = ("#1f77b4", "#d62728")
SHAPES = {"marine": "circle", "marauder": "square", "stalker": "diamond", "zealot": "triangle",
          "zergling": "small triangle", "hydralisk": "hexagon"}
_FIGHT: dict = {}   # game config -> the jitted last step of a battle, without the reset
LETTERS = {"marine": "m", "marauder": "M", "stalker": "S", "zealot": "Z", "zergling": "l",
           "hydralisk": "H"}


def _polygon(cx: float, cy: float, r: float, corners: int, turn: float) -> str:
    angles = turn + 2 * np.pi * np.arange(corners) / corners
    return " ".join(f"{cx + r * np.cos(a):.1f},{cy + r * np.sin(a):.1f}" for a in angles)


def _shape(kind: str, cx: float, cy: float, r: float, style: str) -> str:
    """The SVG element of a unit's shape, centred at (cx, cy), about `r` pixels in radius."""
    if kind == "circle":
        return f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" {style}/>'
    if kind == "square":
        return f'<rect x="{cx - r:.1f}" y="{cy - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" {style}/>'
    corners, turn, size = {"diamond": (4, 0.0, 1.25), "triangle": (3, -np.pi / 2, 1.3),
                           "small triangle": (3, np.pi / 2, 1.3), "hexagon": (6, 0.0, 1.15)}[kind]
    return f'<polygon points="{_polygon(cx, cy, r * size, corners, turn)}" {style}/>'


class SmaxDraw:
    """The frames of one SMAX races game (`SmaxRacesFunctions`), from its states (numpy)."""

    def __init__(self, fns):
        self.fns, self.env, self.n = fns, fns.env, fns.n
        self.origin, self.scale = np.zeros(2), MAP_WIDTH / self.env.map_width
        self.health = np.asarray(self.env.unit_type_health)
        self.radius = np.asarray(self.env.unit_type_radiuses)
        self.range = np.asarray(self.env.unit_type_attack_ranges)

    # -- what a frame says ------------------------------------------------------------------
    def army(self, side: int, races, picks) -> str:
        """'terran, marauder army (6 marauder)': `side`'s race and the army it picked."""
        race = int(races[side])
        army = self.fns.config.menu[race][int(picks[side])]
        units = " + ".join(f"{count} {unit}" for unit, count in army.units)
        return f"{RACES[race]}, {army.name} army ({units})"

    def picks(self, s, actions):
        """Both sides' armies: the state's once the battle runs; at the strategy step the ones
        picked by the actions (a forced army where the game forces one)."""
        if not bool(s.choosing):
            return np.asarray(s.compositions)
        chosen = np.asarray([int(actions[k][COMPOSITION_HEAD]) for k in range(2)])
        return np.where(np.asarray(s.armies) >= 0, np.asarray(s.armies), chosen)

    def targets(self, side: int, target) -> np.ndarray:
        """The units (indices into the state's 2n) that `side`'s target head points at: jaxmarl
        lists side 1's enemies in reverse (RacesSMAX._world_step: n - 1 - target)."""
        target = np.asarray(target, np.int64)
        return self.n + target if side == 0 else self.n - 1 - target

    # -- drawing ---------------------------------------------------------------------------
    def look_at(self, battles) -> None:
        """The view: the part of the map (16:10) that holds every unit of `battles` (jaxmarl
        states) at every step, with a margin, so that the camera stays still."""
        points = np.concatenate([np.asarray(b.unit_positions)[np.asarray(b.unit_alive)] for b in battles]
                                + [np.zeros((0, 2))])
        size = np.array([self.env.map_width, self.env.map_height], np.float64)
        if not len(points):
            self.origin, self.scale = np.zeros(2), MAP_WIDTH / size[0]
            return
        lo, hi = points.min(0) - MARGIN, points.max(0) + MARGIN
        width = max(hi[0] - lo[0], (hi[1] - lo[1]) * MAP_WIDTH / MAP_HEIGHT, MIN_SPAN)
        span = np.array([width, width * MAP_HEIGHT / MAP_WIDTH])
        centre = (lo + hi) / 2
        # inside the map where it fits; a margin past its edges for the units that stand there
        self.origin = np.clip(centre - span / 2, -MARGIN, np.maximum(size - span, 0) + MARGIN)
        self.scale = MAP_WIDTH / width

    def xy(self, position) -> tuple[float, float]:
        """Pixels of a map position (y up on the map, down in SVG)."""
        x, y = (np.asarray(position, np.float64) - self.origin) * self.scale
        return float(x), TOP + MAP_HEIGHT - float(y)

    def units(self, smax, present) -> list[str]:
        """Every living unit (shape, letter, health bar), and a cross where each unit of the
        armies (`present` [2n]: the slots that held a unit) fell."""
        alive, pos = np.asarray(smax.unit_alive), np.asarray(smax.unit_positions)
        types, health = np.asarray(smax.unit_types), np.asarray(smax.unit_health)
        out = []
        for i in range(2 * self.n):
            side = int(i >= self.n)
            x, y = self.xy(pos[i])
            if not alive[i]:
                if present[i]:
                    out.append(f'<path class="dead" d="M{x - 4:.1f},{y - 4:.1f}L{x + 4:.1f},{y + 4:.1f}'
                               f'M{x - 4:.1f},{y + 4:.1f}L{x + 4:.1f},{y - 4:.1f}" stroke="#9ca3af" stroke-width="1.5"/>')
                continue
            unit = UNIT_TYPES[int(types[i])]
            r = max(6.0, self.radius[types[i]] * self.scale)
            style = f'fill="{SIDE_COLOURS[side]}" stroke="#111" stroke-width="1"'
            frac = float(np.clip(health[i] / self.health[types[i]], 0, 1))
            bar = (f'<rect x="{x - r:.1f}" y="{y - r - 6:.1f}" width="{2 * r:.1f}" height="3" fill="#e5e7eb"/>'
                   f'<rect class="health" x="{x - r:.1f}" y="{y - r - 6:.1f}" width="{2 * r * frac:.1f}" height="3" '
                   f'fill="{"#16a34a" if frac > 0.5 else "#f59e0b" if frac > 0.25 else "#dc2626"}"/>')
            out.append(f'<g class="unit" data-side="{side}" data-type="{unit}" data-health="{health[i]:.1f}" '
                       f'data-position="{pos[i][0]:.2f},{pos[i][1]:.2f}">'
                       f'{_shape(SHAPES[unit], x, y, r, style)}'
                       f'<text x="{x:.1f}" y="{y + r * 0.4:.1f}" font-size="{r * 1.1:.0f}" text-anchor="middle" fill="#fff" '
                       f'font-weight="700">{LETTERS[unit]}</text>{bar}</g>')
        return out

    def attacks(self, smax, actions) -> list[str]:
        alive, pos, types = (np.asarray(x) for x in (smax.unit_alive, smax.unit_positions, smax.unit_types))
        out = []
        for side in range(2):
            kinds = np.asarray(actions[side]["action_type"])
            targets = self.targets(side, actions[side]["target"])
            for k in range(self.n):
                i, j = side * self.n + k, int(targets[k])
                if kinds[k] != ATTACK or not alive[i] or not alive[j]:
                    continue
                near = np.linalg.norm(pos[i] - pos[j]) < self.range[types[i]]
                (x0, y0), (x1, y1) = self.xy(pos[i]), self.xy(pos[j])
                out.append(f'<line class="attack" data-side="{side}" x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" '
                           f'y2="{y1:.1f}" stroke="{SIDE_COLOURS[side]}" stroke-width="{2.2 if near else 1}" '
                           f'stroke-opacity="{0.95 if near else 0.3}"/>')
                if near:   # the hit, at the target
                    out.append(f'<circle cx="{x1:.1f}" cy="{y1:.1f}" r="3" fill="#facc15" stroke="{SIDE_COLOURS[side]}"/>')
        return out

    def frame(self, s, smax, actions, picks, present, line: str) -> str:
        """One frame: the battle `smax` (jaxmarl's state) with the attacks of `actions` (None:
        none), the armies `picks` (`present`: their units' slots), and `line` (the step, the
        result)."""
        w, h = MAP_WIDTH, TOP + MAP_HEIGHT
        alive, n = np.asarray(smax.unit_alive), self.n
        parts = [f'<rect width="{w}" height="{h}" fill="#fff"/>']
        for side in range(2):
            army = escape(self.army(side, np.asarray(s.races), picks))
            count = (f"picks the {army}" if bool(s.choosing) else
                     f"{army}: {int(alive[side * n:(side + 1) * n].sum())} of "
                     f"{int(present[side * n:(side + 1) * n].sum())} alive")
            parts.append(f'<text class="army" x="10" y="{22 + 22 * side}" font-size="15" font-weight="600" '
                         f'fill="{SIDE_COLOURS[side]}">side {side}: {count}</text>')
        parts.append(f'<text class="caption" x="10" y="68" font-size="14" fill="#111">{escape(line)}</text>')
        kinds = [UNIT_TYPES[t] for t in sorted(set(np.asarray(smax.unit_types)[present].tolist()))]
        legend = ", ".join(f"{LETTERS[u]} {u}" for u in kinds)
        parts.append(f'<text x="10" y="88" font-size="11" fill="#6b7280">{legend}{" · " if kinds else ""}'
                     f'bar: health · line: an attack (a dot: it hits) · x: a unit fallen</text>')
        # The view: the map (its edges drawn) and what stands on it, clipped to the view.
        (left, top), (right, bottom) = self.xy((0, self.env.map_height)), self.xy((self.env.map_width, 0))
        parts.append(f'<clipPath id="smax-view"><rect x="0" y="{TOP}" width="{w}" height="{MAP_HEIGHT}"/></clipPath>'
                     f'<g clip-path="url(#smax-view)"><rect x="0" y="{TOP}" width="{w}" height="{MAP_HEIGHT}" '
                     f'fill="#e7e2d4"/><rect class="map" x="{left:.1f}" y="{top:.1f}" width="{right - left:.1f}" '
                     f'height="{bottom - top:.1f}" fill="#f3efe4" stroke="#a8a29e"/>')
        parts += self.units(smax, present)
        if actions is not None:   # over the units: in a melee the lines are short
            parts += self.attacks(smax, actions)
        parts.append(f'</g><rect x="0.5" y="{TOP}" width="{w - 1}" height="{MAP_HEIGHT - 0.5}" fill="none" '
                     f'stroke="#a8a29e"/>')
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
                f'font-family="system-ui, sans-serif">{"".join(parts)}</svg>')

    def last_battle(self, s, actions):
        """The battle after the last step: what `SmaxRacesFunctions.step` fought from `s`
        before it reset for the next game (the same keys and jaxmarl's step; jitted once per
        game configuration: seconds to compile, 3 times faster than step by step)."""
        if self.fns.config not in _FIGHT:
            env, fns = self.env, self.fns

            def fight(state, acts):
                _, _, step_key, _ = jax.random.split(state.key, 4)
                decoded = env._decode_discrete_actions(fns._jaxmarl_actions(acts))
                return env.step_env_no_decode(step_key, state.smax, decoded)[1]

            _FIGHT[self.fns.config] = jax.jit(fight)
        acts = tuple({k: jnp.asarray(v) for k, v in a.items()} for a in actions)
        return jax.tree.map(np.asarray, _FIGHT[self.fns.config](jax.tree.map(jnp.asarray, s), acts))

    def frames(self, states, actions, outcome: int) -> list[str]:
        if not states:
            return []
        picks = self.picks(states[0], actions[0])
        last = None if bool(states[-1].choosing) else self.last_battle(states[-1], actions[-1])
        self.look_at([s.smax for s in states] + ([last] if last is not None else []))
        present = np.zeros(2 * self.n, bool)   # the slots that held a unit so far
        out = []
        for t, (s, a) in enumerate(zip(states, actions)):
            present |= np.asarray(s.smax.unit_alive)
            if bool(s.choosing):
                line = "step 0: each side picks its army from its race's menu; the armies spawn at their edges"
                out.append(self.frame(s, s.smax, None, picks, present, line))
            else:
                out.append(self.frame(s, s.smax, a, picks, present, f"step {t} of at most {self.env.max_steps}"))
        if last is not None:
            result = {1: "side 0 won", -1: "side 1 won", 0: "a draw"}[int(np.sign(outcome))]
            out.append(self.frame(states[-1], last, None, picks, present,
                                  f"the end, after step {len(states) - 1}: {result}"))
        return out


def frames(functions, states, actions, outcome: int) -> list[str]:
    """`Capabilities.draw` of SMAX races (docs/games.md): an SVG frame per step and one of the
    battle's end."""
    return SmaxDraw(functions).frames(states, actions, outcome)
