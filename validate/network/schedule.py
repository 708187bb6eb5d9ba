"""Which pairs of nodes test each other, in rounds of disjoint pairs run in parallel.

Two schedules:
- `tournament`: the round-robin (circle method), every pair exactly once in N-1 rounds (N even)
  or N rounds (N odd, one node rests per round). The full node x node matrix.
- `ring`: neighbours on a ring, split into 2 rounds of disjoint pairs (3 when N is odd). Every
  node is in two pairs, so a slow node (both low) is told from a slow link (one low) in a
  constant number of rounds; `confirm_round` then pairs each suspect with fresh partners.
Pure functions of the node order, so a run is reproducible and testable without hosts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Pair = tuple[str, str]


def tournament(nodes: Sequence[str]) -> list[list[Pair]]:
    names = list(nodes)
    if len(names) < 2:
        return []
    if len(names) % 2:
        names.append("")  # the bye: whoever meets it rests this round
    n = len(names)
    rounds: list[list[Pair]] = []
    fixed, rest = names[0], names[1:]
    for _ in range(n - 1):
        ring = [fixed, *rest]
        pairs = [(ring[i], ring[n - 1 - i]) for i in range(n // 2)]
        rounds.append([(a, b) for a, b in pairs if a and b])
        rest = rest[-1:] + rest[:-1]
    return rounds


def ring(nodes: Sequence[str]) -> list[list[Pair]]:
    names = list(nodes)
    n = len(names)
    if n < 2:
        return []
    if n == 2:
        return [[(names[0], names[1])]]
    edges = [(names[i], names[(i + 1) % n]) for i in range(n)]
    if n % 2 == 0:
        return [edges[0::2], edges[1::2]]
    # odd ring: edges 0,2,..,n-3 | 1,3,..,n-2 | the closing edge (n-1 -> 0) alone
    return [edges[0 : n - 1 : 2], edges[1 : n - 1 : 2], [edges[n - 1]]]


def confirm_round(
    suspects: Iterable[str], nodes: Sequence[str], tested: set[frozenset[str]], avoid: set[str]
) -> list[Pair]:
    """One round pairing each suspect with a node it has not met and that is not itself suspect."""
    busy: set[str] = set()
    out: list[Pair] = []
    for s in suspects:
        for partner in nodes:
            if partner == s or partner in avoid or partner in busy or frozenset((s, partner)) in tested:
                continue
            out.append((s, partner))
            busy.update((s, partner))
            break
    return out


def all_disjoint(rounds: Iterable[Iterable[Pair]]) -> bool:
    for rnd in rounds:
        seen: set[str] = set()
        for a, b in rnd:
            if a in seen or b in seen or a == b:
                return False
            seen.update((a, b))
    return True
