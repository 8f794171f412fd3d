"""Kuhn and Leduc poker drawn for a person watching a game (`Capabilities.draw`; the dashboard's
watch page, `experiments.watch`): the game as its hands, one SVG frame per move.

Each frame shows, as a spectator sees a televised hand, both players' private cards (side 0 and
side 1, with the OpenSpiel player each plays: player 0 opens the betting), Leduc's board card
once the second round has dealt it, the pot and each side's chips in it, the betting so far and
the move this step plays; the last frame shows the hand after the last move: the fold or the
showdown and the chips won. `frames(functions, states, actions, outcome)` is the protocol of
docs/games.md (`draw`).
"""

from __future__ import annotations

from xml.sax.saxutils import escape

import jax
import jax.numpy as jnp
import numpy as np

from actors.games.poker.game import ACTION_HEAD, FOLD, PokerText

WIDTH, HEIGHT = 600, 360
SIDE_COLOURS = ("#1f77b4", "#d62728")
SUITS = ("♠", "♥")   # Leduc's two suits: card c is rank c // 2 of suit c % 2
_ADVANCE: dict = {}   # game config -> the game's last move without the reset, jitted
VERBS = {"Pass": "passes", "Bet": "bets", "Fold": "folds", "Call": "calls", "Raise": "raises"}


def _card(x: float, y: float, label: str, suit: str, face_up: bool, css: str) -> str:
    """One card, 56 x 80, its rank (and suit) in the middle; face down: a patterned back."""
    if not face_up:
        return (f'<g class="{css} face-down"><rect x="{x}" y="{y}" width="56" height="80" rx="7" fill="#64748b" '
                f'stroke="#334155"/><text x="{x + 28}" y="{y + 48}" font-size="22" text-anchor="middle" '
                f'fill="#e2e8f0">?</text></g>')
    red = suit == "♥"
    return (f'<g class="{css}" data-card="{escape(label)}"><rect x="{x}" y="{y}" width="56" height="80" rx="7" '
            f'fill="#fff" stroke="#111"/><text x="{x + 28}" y="{y + 46}" font-size="30" font-weight="700" '
            f'text-anchor="middle" fill="{"#b91c1c" if red else "#111"}">{escape(label)}</text>'
            f'<text x="{x + 28}" y="{y + 70}" font-size="16" text-anchor="middle" '
            f'fill="{"#b91c1c" if red else "#111"}">{suit}</text></g>')


class PokerDraw:
    """The frames of one game of Kuhn or Leduc (`PokerFunctions`), from its states (numpy)."""

    def __init__(self, fns):
        self.fns = fns
        self.text = PokerText(fns)
        self.leduc = fns.config.leduc
        self.title = "Leduc poker" if self.leduc else "Kuhn poker"

    def suit(self, c: int) -> str:
        return SUITS[int(c) % 2] if self.leduc else ""

    def mover_action(self, s, actions) -> tuple[int, int]:
        """(the side to move at `s`, the action it plays)."""
        side = int(s.player) ^ int(s.seat)
        return side, int(np.asarray(actions[side][ACTION_HEAD]))

    def frame(self, s, rounds, caption: str, board_shown: bool, highlight: int | None) -> str:
        """One frame: the state `s` (numpy), the betting `rounds` so far (OpenSpiel players'
        moves), `caption` under the title."""
        seat = int(s.seat)
        cards, contrib = np.asarray(s.cards), np.asarray(s.contrib)
        parts = [f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#0f5132"/>',
                 f'<text x="20" y="30" font-size="20" font-weight="700" fill="#fff">{self.title}</text>',
                 f'<text class="caption" x="20" y="56" font-size="15" fill="#fef3c7">{escape(caption)}</text>']
        for side in range(2):
            player = seat ^ side
            x = 30 if side == 0 else WIDTH - 230
            ring = ' stroke="#fde047" stroke-width="3"' if highlight == side else ""
            parts.append(f'<rect x="{x - 10}" y="80" width="220" height="150" rx="10" fill="{SIDE_COLOURS[side]}" '
                         f'fill-opacity="0.35"{ring}/>')
            parts.append(f'<text x="{x}" y="102" font-size="15" font-weight="700" fill="#fff">side {side}'
                         f'</text><text x="{x}" y="120" font-size="12" fill="#e5e7eb">OpenSpiel player {player}'
                         f'{" (opens)" if player == 0 else ""}</text>')
            parts.append(_card(x, 132, self.text.card(cards[player]), self.suit(cards[player]), True,
                               f"card private side-{side}"))
            parts.append(f'<text x="{x + 70}" y="170" font-size="14" fill="#fff">chips in: '
                         f'{int(contrib[player])}</text>')
        if self.leduc:
            parts.append(f'<text x="{WIDTH / 2}" y="102" font-size="13" text-anchor="middle" fill="#e5e7eb">'
                         f'board</text>')
            parts.append(_card(WIDTH / 2 - 28, 110, self.text.card(cards[2]), self.suit(cards[2]), board_shown,
                               "card board"))
        parts.append(f'<text class="pot" x="{WIDTH / 2}" y="222" font-size="16" font-weight="700" '
                     f'text-anchor="middle" fill="#fde047">pot {int(contrib.sum())}</text>')
        y = 262
        for r, moves in enumerate(rounds):
            label = f"round {r + 1}" if self.leduc else "betting"
            played = ", ".join(f"side {p ^ seat} {VERBS.get(name, name)}" for p, name in moves) or "none yet"
            parts.append(f'<text class="betting" x="20" y="{y}" font-size="14" fill="#fff">{label}: '
                         f'{escape(played)}</text>')
            y += 22
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
                f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="system-ui, sans-serif">{"".join(parts)}</svg>')

    def frames(self, states, actions, outcome: int) -> list[str]:
        out = []
        for t, (s, a) in enumerate(zip(states, actions)):
            side, action = self.mover_action(s, a)
            rounds = self.text._moves(s)
            caption = f"move {t + 1}: side {side} {VERBS.get(self.text.names[action], self.text.names[action])}"
            out.append(self.frame(s, rounds, caption, int(s.round) > 0, side))
        if states:
            out.append(self.end(states[-1], actions[-1]))
        return out

    def end(self, s, actions) -> str:
        """The hand after its last move: the fold or the showdown, and the chips won."""
        side, action = self.mover_action(s, actions)
        rounds = self.text._moves(s)
        rounds[-1].append((int(s.player), self.text.names[action]))
        if self.fns.config not in _ADVANCE:
            _ADVANCE[self.fns.config] = jax.jit(self.fns.advance)
        after, _, returns = _ADVANCE[self.fns.config](jax.tree.map(jnp.asarray, s), action)
        after, returns = jax.tree.map(np.asarray, after), np.asarray(returns)
        seat = int(s.seat)
        won = [float(returns[seat ^ k]) for k in range(2)]   # chips won per side
        folded = int(self.fns.kinds[int(s.contrib[s.player] < s.contrib[1 - s.player]), action]) == FOLD
        how = f"side {side} folds" if folded else "showdown"
        result = ("a split pot" if won[0] == 0 else
                  f"side {0 if won[0] > 0 else 1} wins {abs(won[0]):g} chips")
        return self.frame(after, rounds, f"the end: {how}, {result}", self.leduc and (int(after.round) > 0 or not folded),
                          None)


def frames(functions, states, actions, outcome: int) -> list[str]:
    """`Capabilities.draw` of Kuhn and Leduc (docs/games.md): an SVG frame per move and one of
    the hand's end."""
    return PokerDraw(functions).frames(states, actions, outcome)
