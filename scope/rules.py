"""Scope: which rooms and senders may be read, and why not.

Rule 1: every decision about whether a room or a sender may enter the index lives in this file.
The refresher asks ``decide`` and ``timeline_refusal`` and obeys; it never decides scope itself.

Rule 2: this file knows nothing of nio, the index, config files or the network. It sees
``RoomFacts`` (from ``scope/facts.py``), a ``Policy`` (the operator's lists, already parsed) and
the set of allowed room ids the refresher resolved. It does no I/O and keeps no state.

Rule 3: when in doubt, refuse. Every rule here is a *refusal*; admission is what is left when no
refusal matched. A wrong refusal costs a room in the index; a wrong admission can put a DM or
Discord traffic in it, which no later step may be relied on to filter out.

Theory of operation
-------------------

``REFUSAL_RULES`` is an ordered table. Each row is a reason, a check over (facts, policy,
allowed room ids) that returns evidence or None, and what the evidence says. ``decide`` runs every
row: the first that matched is the ``reason``, the others that matched are listed in ``also``, so
the journal can say "dm (also: not_allowed)". Evidence is plain JSON naming the signal that fired
(member ids, aliases, event types, patterns): never message text.

Rooms change while they are read. ``timeline_refusal`` judges one event met mid-history (a puppet
sender, a bridge or encryption state event, a puppet joining); the refresher then refuses the
whole room exactly as if ``decide`` had refused it.

Which rooms are read (for the operator)
---------------------------------------

A room is read only if the service user has joined it, it is listed in ``ROOMS`` (by room id, or
by an alias the homeserver's directory resolves to it, never by an alias the room publishes in its
own state, which any room can claim; ``*`` lists every joined room), and none of these refusals
applies. They are checked in this order; the journal names the first and lists the rest:

1. ``dm`` — the room is a direct chat. Any one signal is enough; all that fired are reported:

   - ``is_direct``: a member's ``m.room.member`` carries ``is_direct``, either in its content or
     in ``unsigned.prev_content``. Synapse sets it only on the invite, so after the join it
     survives only as the previous content. The service user's own membership counts too.
   - ``m_direct``: the room is listed in the service user's ``m.direct`` account data.
   - ``two_party_private``: the room is not public, has no canonical alias, no name, and at most
     two people besides the service user have joined or are invited. This is what a DM looks
     like when both flags above are missing (a client that never wrote ``m.direct``, an invite
     that was re-sent).
   - ``unnamed_private``: the same with more people, and no alt alias either: a group DM, whose
     ``is_direct`` a member's display-name change drops from state.

     Both are sound enough because refusing is the safe side: they can only refuse an unnamed
     private room, which rarely holds community talk, and the operator can make such a room
     eligible by giving it a name or an alias.

   A DM is refused even if ``ROOMS`` lists it.
2. ``bridged`` — the room carries ``m.bridge`` or ``uk.half-shot.bridge`` state (any state_key),
   or any member, in any membership (join, invite, leave, ban), is a bridge puppet. Puppets are
   the built-in Discord patterns (``@_discord_…`` of matrix-appservice-discord; ``@discord_…`` and
   ``@discordbot`` of mautrix-discord; ``@_discordpuppet_…`` of mx-puppet-discord; ``@_ooye_…`` of
   Out Of Your Element; on any server, in any letter case) plus ``BRIDGE_SENDERS``. The built-in
   patterns always apply: the operator can add patterns, never remove these.
3. ``encrypted`` — the room has ``m.room.encryption`` state. The index never stores ciphertext,
   and an encrypted room's plaintext was meant for its members only.
4. ``room_type`` — the room's create event has a ``type`` (``m.space`` or any other): not a chat
   room, nothing in it is conversation.
5. ``excluded`` — the room id, or any name the room has or was named by (canonical alias, alt
   aliases, directory aliases, the ``ROOMS`` entry that found it) is in ``EXCLUDE_ROOMS`` or in the
   built-in exclusions ``#users:*``, ``#members:*``, ``#patrons:*``. An upgraded room keeps its
   exclusion: the old room is matched by the aliases it had before the upgrade cleared them
   (``unsigned.prev_content`` of its canonical alias event), and an exclusion by id covers the
   rooms it was upgraded from (m.room.create's predecessor) and into (m.room.tombstone). Aliases compare
   case-insensitively (``#Users:HS`` is ``#users:hs``); ids exactly. ``#name:*`` matches that alias
   on any server. The built-ins apply even when ``EXCLUDE_ROOMS`` is set: a second lock.
6. ``not_allowed`` — the room is not listed in ``ROOMS``. An empty ``ROOMS`` admits nothing.

Before a join (``decide_before_join``) the same table runs over what the homeserver shows
without one (``scope.facts.facts_before_join``). Those facts are partial, so only a refusal
counts: a room they refuse is never joined (a DM invite is never accepted); a room they do not
refuse is joined and decided again from its full state. With partial facts ``two_party_private``
fires on the summary's joined-member count (two or fewer), the member list being unknown.

A room refused for any reason is never read, and what the index already holds for it is dropped.
The same refusals are checked on every event while a room is read: a puppet sending, a bridge or
encryption state event, or a puppet's membership event refuses the room whole from then on.
An ``m.room.encrypted`` event in an unencrypted room does not refuse the room; that event alone
is skipped by the chunker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from scope.errors import PolicyError
from scope.facts import BRIDGE_STATE_TYPES, ENCRYPTION_STATE_TYPE, MEMBER_STATE_TYPE, RoomFacts

# Discord puppets and bots, any server, any letter case. Underscore required after "discord":
# "@discordia_fan" is a person, not a puppet. matrix-appservice-discord: @_discord_<snowflake> (and
# its bot @_discord_bot). mautrix-discord: @discord_<snowflake> puppets and the @discordbot bot.
# mx-puppet-discord: @_discordpuppet_<id>. Out Of Your Element: @_ooye_<name> and @_ooye_bot.
DEFAULT_BRIDGE_SENDERS: tuple[str, ...] = (
    r"(?i)@_discord_[^:]*:.+",
    r"(?i)@discord_[^:]*:.+",
    r"(?i)@discordbot:.+",
    r"(?i)@_discordpuppet_[^:]*:.+",
    r"(?i)@_ooye_[^:]*:.+",
)

# Community-roster rooms that are never indexed, whatever EXCLUDE_ROOMS says.
BUILTIN_EXCLUDE: tuple[str, ...] = ("#users:*", "#members:*", "#patrons:*")

ALL_JOINED = "*"  # in ``Policy.allowed``: every room the service user has joined
ANY_SERVER = "*"  # as an alias's server part in ``Policy.exclude``: ``#users:*``

# Long member lists are cut in evidence so a journal line stays readable; ``count`` keeps the total.
EVIDENCE_LIST_LIMIT = 10

Evidence = dict[str, Any]


@dataclass(frozen=True)
class Policy:
    """The operator's scope lists, validated. Construction raises ``PolicyError`` (a ``ValueError``) naming
    the field and the bad entry; use ``Policy.build`` to pass lists straight from config."""

    allowed: tuple[str, ...]  # ROOMS: room ids and/or aliases, or "*"
    exclude: tuple[str, ...] = ()  # EXCLUDE_ROOMS: room ids, exact aliases, or "#localpart:*"
    bridge_sender_patterns: tuple[str, ...] = ()  # BRIDGE_SENDERS: regexes, re.fullmatch on mxids
    _puppet_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for field_name, entries in (
            ("allowed", self.allowed),
            ("exclude", self.exclude),
            ("bridge_sender_patterns", self.bridge_sender_patterns),
        ):
            if not isinstance(entries, tuple):
                raise PolicyError(field_name, None, f"expected a tuple of strings, got {type(entries).__name__}")
            for position, entry in enumerate(entries):
                if not isinstance(entry, str) or not entry:
                    raise PolicyError(f"{field_name}[{position}]", None, f"expected a non-empty string, got {entry!r}")
        for position, entry in enumerate(self.allowed):
            if entry != ALL_JOINED and not is_room_id(entry) and not is_alias(entry):
                raise PolicyError(f"allowed[{position}]", entry, "not a room id (!…), an alias (#name:server) or '*'")
        for position, entry in enumerate(self.exclude):
            if not is_room_id(entry) and not is_alias(entry):
                problem = "not a room id (!…), an alias (#name:server) or '#name:*'"
                raise PolicyError(f"exclude[{position}]", entry, problem)
        compiled = []
        for position, pattern in enumerate(DEFAULT_BRIDGE_SENDERS + self.bridge_sender_patterns):
            try:
                compiled.append(re.compile(pattern))
            except re.error as err:
                where = position - len(DEFAULT_BRIDGE_SENDERS)
                raise PolicyError(
                    f"bridge_sender_patterns[{where}]", pattern, f"not a valid regular expression ({err})"
                ) from None
        object.__setattr__(self, "_puppet_patterns", tuple(compiled))

    @classmethod
    def build(
        cls,
        *,
        allowed: Iterable[str],
        exclude: Iterable[str] = (),
        bridge_sender_patterns: Iterable[str] = (),
    ) -> Policy:
        """A policy from any iterables of strings (lists from config). Patterns are compiled here;
        a bad one raises ``PolicyError`` naming it. A bare string is refused, not split into letters."""
        lists = {"allowed": allowed, "exclude": exclude, "bridge_sender_patterns": bridge_sender_patterns}
        for field_name, entries in lists.items():
            if isinstance(entries, (str, bytes)):
                raise PolicyError(field_name, None, f"expected a list of strings, got the single string {entries!r}")
        return cls(**{field_name: tuple(entries) for field_name, entries in lists.items()})

    @property
    def allows_every_joined_room(self) -> bool:
        """``ROOMS`` holds ``*``. The refresher must not try to resolve ``*`` as an alias."""
        return ALL_JOINED in self.allowed

    @property
    def effective_exclude(self) -> tuple[str, ...]:
        """Operator exclusions, then the built-in second lock."""
        return self.exclude + tuple(entry for entry in BUILTIN_EXCLUDE if entry not in self.exclude)

    def puppet_pattern(self, user_id: str) -> str | None:
        """The first bridge pattern ``user_id`` fully matches, or None if it is not a puppet."""
        for pattern in self._puppet_patterns:
            if pattern.fullmatch(user_id):
                return pattern.pattern
        return None


@dataclass(frozen=True)
class Decision:
    """The verdict on one room. ``evidence`` is JSON-serialisable and never holds message text."""

    room_id: str
    admitted: bool
    reason: str  # "admitted" or a REFUSAL_RULES reason
    evidence: Evidence
    also: tuple[str, ...]  # the other refusal reasons that matched, in table order
    alias: str | None  # the canonical alias, if any


# --- the checks, one per rule: (facts, policy, allowed room ids) -> evidence or None ---------------


def direct_chat_signals(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    signals: list[Evidence] = []
    for member in facts.members:
        if member.is_direct:
            signals.append({"signal": "is_direct", "member": member.user_id, "membership": member.membership})
    if facts.in_m_direct:
        signals.append({"signal": "m_direct", "account_data_of": facts.service_user})
    present = [
        member.user_id
        for member in facts.members
        if member.membership in ("join", "invite") and member.user_id != facts.service_user
    ]
    unnamed_private = facts.join_rule != "public" and facts.canonical_alias is None and facts.name is None
    if unnamed_private and facts.complete and len(present) <= 2:
        signals.append({"signal": "two_party_private", "join_rule": facts.join_rule, "members": present})
    elif unnamed_private and facts.complete and not facts.alt_aliases:
        # A group DM: clients name it by its members and never give it a name or an alias, and its
        # is_direct is gone from state once a member changes their display name (the new member
        # event's prev_content is the join, not the invite). Size does not make it a community room.
        signals.append(
            {"signal": "unnamed_private", "join_rule": facts.join_rule, "members": present[:EVIDENCE_LIST_LIMIT]}
        )
    elif unnamed_private and not facts.complete and facts.joined_count is not None and facts.joined_count <= 2:
        signals.append(
            {"signal": "two_party_private", "join_rule": facts.join_rule, "joined_count": facts.joined_count}
        )
    return _with_all_signals(signals)


def bridge_signals(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    signals: list[Evidence] = [
        {"signal": "bridge_state", "event_type": event_type, "state_key": state_key}
        for event_type, state_key in facts.bridge_state
    ]
    puppets = [
        (member, pattern) for member in facts.members if (pattern := policy.puppet_pattern(member.user_id)) is not None
    ]
    for member, pattern in puppets[:EVIDENCE_LIST_LIMIT]:
        signals.append(
            {"signal": "puppet_member", "member": member.user_id, "membership": member.membership, "pattern": pattern}
        )
    evidence = _with_all_signals(signals)
    if evidence is not None and puppets:
        evidence["puppet_count"] = len(puppets)
    return evidence


def encryption_signal(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    if facts.encryption is None:
        return None
    return {"signal": ENCRYPTION_STATE_TYPE, "algorithm": facts.encryption}


def room_type_signal(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    if facts.room_type is None:
        return None
    return {"signal": "room_type", "room_type": facts.room_type}


def is_excluded(facts: RoomFacts, policy: Policy) -> Evidence | None:
    """Which exclusion entry names this room, or None: by id, canonical alias, an alt alias, or a
    name it was found by (``named_by``: the ROOMS entry, directory aliases). ``#x:*`` matches
    localpart ``x`` on any server. Aliases compare case-insensitively, ids exactly."""
    names = [("room_id", facts.room_id)]
    names += [("canonical_alias", facts.canonical_alias)] if facts.canonical_alias else []
    names += [("alt_alias", alias) for alias in facts.alt_aliases]
    published = set(facts.aliases)
    names += [("named_by", alias) for alias in facts.named_by if alias not in published]
    # An upgraded room: the aliases it had before the upgrade cleared them, and the rooms it was
    # upgraded from and into (an exclusion by id follows the upgrade both ways).
    names += [("former_alias", alias) for alias in facts.former_aliases]
    names += [("upgraded_from", facts.predecessor)] if facts.predecessor else []
    names += [("upgraded_to", facts.successor)] if facts.successor else []
    operator_entries = set(policy.exclude)
    for entry in policy.effective_exclude:
        for signal, value in names:
            if _exclusion_matches(entry, value):
                return {"signal": signal, "value": value, "entry": entry, "builtin": entry not in operator_entries}
    return None


def _excluded(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    return is_excluded(facts, policy)


def _allowed_by(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    """Which ROOMS entry lists this room, or None. An alias in ROOMS lists the room the directory
    resolves it to (``allowed_room_ids``), never a room that publishes the alias in its own state:
    any room, on any server, can claim ``#general:our.server`` in its m.room.canonical_alias."""
    if facts.room_id in allowed_room_ids or facts.room_id in policy.allowed:
        return {"signal": "room_id", "entry": facts.room_id}
    if policy.allows_every_joined_room:
        return {"signal": "all_joined", "entry": ALL_JOINED}
    return None


def not_listed(facts: RoomFacts, policy: Policy, allowed_room_ids: frozenset[str]) -> Evidence | None:
    if _allowed_by(facts, policy, allowed_room_ids) is not None:
        return None
    # The names the operator could list to admit it (if nothing else refuses it).
    return {"signal": "not_listed", "aliases": list(facts.aliases)}


@dataclass(frozen=True, slots=True)
class Rule:
    reason: str
    check: Callable[[RoomFacts, Policy, frozenset[str]], Evidence | None]
    evidence: str  # what the check reports when it fires


# The table. Order is priority: the first row that matches names the refusal.
REFUSAL_RULES: tuple[Rule, ...] = (
    Rule(
        "dm",
        direct_chat_signals,
        "signals: is_direct {member, membership} | m_direct {account_data_of} | "
        "two_party_private {join_rule, members}; 'signal' is the first, 'signals' all",
    ),
    Rule(
        "bridged",
        bridge_signals,
        "signals: bridge_state {event_type, state_key} | puppet_member {member, membership, pattern}; "
        "'signal' is the first, 'signals' all (puppets cut at EVIDENCE_LIST_LIMIT), puppet_count",
    ),
    Rule("encrypted", encryption_signal, "signal m.room.encryption {algorithm}"),
    Rule("room_type", room_type_signal, "signal room_type {room_type}: the create event's type (m.space, ...)"),
    Rule("excluded", _excluded, "signal room_id | canonical_alias | alt_alias | named_by {value, entry, builtin}"),
    Rule("not_allowed", not_listed, "signal not_listed {aliases}: the names that could be listed in ROOMS"),
)

REASONS: tuple[str, ...] = tuple(rule.reason for rule in REFUSAL_RULES)
ADMITTED = "admitted"


def decide(facts: RoomFacts, policy: Policy, *, allowed_room_ids: frozenset[str]) -> Decision:
    """Admit or refuse a room. ``allowed_room_ids`` are the ``ROOMS`` entries the refresher resolved
    to ids; a room is also listed if its own id is in ROOMS (or ROOMS is ``*``)."""
    matched = [
        (rule.reason, evidence)
        for rule in REFUSAL_RULES
        if (evidence := rule.check(facts, policy, allowed_room_ids)) is not None
    ]
    if matched:
        reason, evidence = matched[0]
        also = tuple(other for other, _ in matched[1:])
        return Decision(facts.room_id, False, reason, evidence, also, facts.canonical_alias)
    listed_by = _allowed_by(facts, policy, allowed_room_ids) or {}
    return Decision(facts.room_id, True, ADMITTED, listed_by, (), facts.canonical_alias)


def decide_before_join(facts: RoomFacts, policy: Policy, *, allowed_room_ids: frozenset[str]) -> Decision | None:
    """The refusal that what the homeserver shows before a join already proves, or None: join the
    room, then ``decide`` from its full state. Never an admission: partial facts can prove a
    refusal, not the absence of one. ``ROOMS = *`` admits rooms already joined, so a room it
    alone would admit is refused here as ``not_allowed`` (an invite is not a reason to join)."""
    decision = decide(facts, policy, allowed_room_ids=allowed_room_ids)
    if not decision.admitted:
        return decision
    if decision.evidence.get("signal") == "all_joined":
        evidence = {
            "signal": "not_listed",
            "aliases": list(facts.aliases),
            "why": "ROOMS '*' admits joined rooms; only a room ROOMS names is joined",
        }
        return Decision(facts.room_id, False, "not_allowed", evidence, (), facts.canonical_alias)
    return None


def timeline_refusal(
    *, sender: str, event_type: str, state_key: str | None, policy: Policy
) -> tuple[str, Evidence] | None:
    """Judge one event met mid-history. Returns (reason, evidence) if the room must now be refused
    whole, else None. Checks, first match wins: a puppet sender; bridge state; a puppet's
    membership event; encryption state. A non-state event (``state_key`` None) of a bridge or
    encryption type is not state and changes nothing."""
    sender_pattern = policy.puppet_pattern(sender) if isinstance(sender, str) else None
    if sender_pattern is not None:
        return "bridged", {
            "signal": "puppet_sender",
            "sender": sender,
            "event_type": event_type,
            "pattern": sender_pattern,
        }
    if state_key is None:
        return None
    if event_type in BRIDGE_STATE_TYPES:
        return "bridged", {"signal": "bridge_state", "event_type": event_type, "state_key": state_key, "sender": sender}
    if event_type == MEMBER_STATE_TYPE:
        member_pattern = policy.puppet_pattern(state_key)
        if member_pattern is not None:
            return "bridged", {
                "signal": "puppet_member",
                "member": state_key,
                "sender": sender,
                "pattern": member_pattern,
            }
    if event_type == ENCRYPTION_STATE_TYPE:
        return "encrypted", {"signal": ENCRYPTION_STATE_TYPE, "sender": sender}
    return None


def _with_all_signals(signals: list[Evidence]) -> Evidence | None:
    if not signals:
        return None
    return {**signals[0], "signals": signals}


def is_room_id(entry: str) -> bool:
    """``!opaque`` (room version 12) or ``!opaque:server`` (older versions); no whitespace."""
    return entry.startswith("!") and len(entry) > 1 and not any(ch.isspace() for ch in entry)


def is_alias(entry: str) -> bool:
    """``#name:server`` (``#name:*`` passes too: ``*`` is a server part here); no whitespace."""
    localpart, colon, server = entry[1:].partition(":")
    return entry.startswith("#") and bool(localpart and colon and server) and not any(ch.isspace() for ch in entry)


def _exclusion_matches(entry: str, name: str) -> bool:
    if entry == name:
        return True
    if not entry.startswith("#") or not name.startswith("#"):
        return False  # a room id matches only itself
    # Aliases compare case-insensitively: a homeserver may hand out "#Users:hs" for "#users:hs",
    # and a lock that a capital letter opens is no lock.
    entry, name = entry.casefold(), name.casefold()
    if entry == name:
        return True
    localpart, _, server = entry.partition(":")
    if server != ANY_SERVER:
        return False
    return name.partition(":")[0] == localpart
