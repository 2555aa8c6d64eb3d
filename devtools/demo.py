"""`make demo`: huginn-chat end to end on a throwaway homeserver, in under two minutes, offline.

Owns: the demo's script — start a Synapse on 127.0.0.1 (``devtools.synapse``) in a temporary
directory (on /dev/shm when there is one), seed a small community from a fixed seed, run
``huginn-chat refresh`` and explain its refusals, start ``huginn-chat serve``, run searches and a
window lookup through the real CLI, check what the index holds, and tear everything down again,
on success, failure, Ctrl-C or SIGTERM. ``run_demo`` is the whole of it; ``main`` is the command.

Must not: be imported by the refresher or the reader, reach beyond 127.0.0.1, print a token, or
call the daemon's machinery in-process — every step runs the commands an operator or a Persona
would run (``python -m daemon.cli.main …``), so the demo shows (and tests) the real paths.

The community is the Riverside Commons: a hackerspace with a garden out back and a book club.
Hand-written conversation threads carry the topics the searches look for; small talk drawn with
``random.Random(SEED)`` fills the gaps between them, so every run seeds the same messages. They
are dated over four weeks of spring 2025 (sent through the dev server's history appservice with
``?ts=``), so the refresher's windows close where the conversation pauses, as in a real room.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TextIO

from daemon.cli.client import ReaderUnavailable, exchange
from daemon.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, OperationalError
from daemon.refresher.run_report import render_run
from devtools.synapse import stop_process

REPO = Path(__file__).resolve().parent.parent
SERVER_NAME = "riverside.test"
SEED = 20250412
SERVICE_USER = "huginn"
PUPPET_LOCALPART = "_discord_418273645"

REFRESH_TIMEOUT_S = 90.0
READER_READY_TIMEOUT_S = 45.0
CLI_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0

# Pasted into #infra on purpose; the index must hold them only as [redacted:<kind>]. Built from
# pieces so a secret scanner reading this file does not mistake them for real credentials.
SECRETS = {
    "github_token": "ghp_" + "R1v3rs1deC0mm0nsDem0T0ken0000000042",
    "password": "Sprout" + "-Tr0wel-2291",
}
# Sent, then redacted by its author before the refresh: no trace of it may reach the index.
REDACTED_TEXT = "my gate code at home is 7342"
# The edit of the workday announcement: the index holds the new text, not the old.
EDITED_FROM = "Spring workday is on Saturday 12 April"
EDITED_TO = "Spring workday moved to Sunday 13 April"


# ---------------------------------------------------------------------------------------------
# The community


@dataclass(frozen=True)
class Room:
    key: str
    title: str
    alias_localpart: str | None  # None: no alias (the DM)
    members: tuple[str, ...]
    kind: str = "public"  # public | dm | bridge_state | puppet | encrypted | members_only

    def alias(self) -> str | None:
        return f"#{self.alias_localpart}:{SERVER_NAME}" if self.alias_localpart else None


ROOMS: tuple[Room, ...] = (
    Room(
        "general",
        "Riverside Commons",
        "general",
        ("maya", "tomas", "priya", "jonas", "elif", "sam", "noor", "ben", "lena"),
    ),
    Room("garden", "Garden plots", "garden", ("maya", "priya", "jonas", "elif", "sam", "noor", "ben", "lena")),
    Room("infra", "Space infrastructure", "infra", ("tomas", "priya", "jonas", "elif", "sam", "noor", "ben")),
    Room("bookclub", "Book club", "bookclub", ("lena", "priya", "jonas", "elif", "noor", "ben")),
    # Rooms the scope must refuse, whatever the operator listed.
    Room("dm", "", None, ("maya",), kind="dm"),
    Room("discord", "Discord: #makers", "discord-makers", ("tomas", "sam"), kind="bridge_state"),
    Room("gaming", "Gaming night", "gaming-night", ("ben", "sam"), kind="puppet"),
    Room("board", "Board", "board", ("priya", "tomas", "maya"), kind="encrypted"),
    Room("members", "Members only", "members", ("priya", "maya"), kind="members_only"),
)
ADMITTED_ROOMS = ("general", "garden", "infra", "bookclub")
REFUSED_ROOMS = {"dm": "dm", "discord": "bridged", "gaming": "bridged", "board": "encrypted", "members": "excluded"}
OPERATOR_JOINED = "gaming"  # the operator put the service user here by hand: refused, never read, not left


@dataclass(frozen=True)
class Say:
    speaker: str
    text: str
    mark: str | None = None  # remember the event id under this name
    at_ms: int | None = None  # origin_server_ts; set by ``conversation``


@dataclass(frozen=True)
class Edit:
    speaker: str
    mark: str
    text: str
    at_ms: int | None = None


@dataclass(frozen=True)
class Redact:
    speaker: str
    mark: str  # a redaction carries the time it is sent: its target keeps its own


@dataclass(frozen=True)
class Encrypted:
    speaker: str
    at_ms: int | None = None


Step = Say | Edit | Redact | Encrypted

# Threads: the topics, each told in order within its room.
THREADS: dict[str, list[list[Step]]] = {
    "general": [
        [
            Say(
                "maya",
                f"{EDITED_FROM} from 9am. We're rebuilding the raised beds by the fence and clearing the bramble corner.",
                mark="workday",
            ),
            Say("jonas", "I can bring my cordless drill, a spare battery and a box of deck screws."),
            Say("priya", "I've got two wheelbarrows and a pair of loppers, I'll drop them off on Friday evening."),
            Say("sam", "Who has a post hole digger? The new fence posts won't dig themselves."),
            Say("ben", "My neighbour has one, I'll ask if we can borrow it for the day."),
            Say("maya", "Lovely. Could someone bring work gloves in small sizes? The school group is coming too."),
            Say("elif", "I'll pick up a pack of children's gloves from the hardware store on Thursday."),
            Say("noor", "I'll bring the big thermos and make chai for everyone."),
            Say("jonas", "Do we need a skip for the bramble cuttings or can they go in the green waste?"),
            Say("maya", "Green waste is fine, the council collects on Monday."),
        ],
        [
            Say("noor", "Potluck after the workday? I can do a big pot of lentil soup."),
            Say("lena", "Yes please! I'll bake focaccia with rosemary from the herb spiral."),
            Say("ben", "I'll bring proper plates and cutlery so we don't use paper ones."),
            Say("priya", "Can we label anything with nuts? My son is allergic."),
            Say("noor", "Good call, I'll print little cards for the table."),
        ],
        [
            Say("jonas", f"oops wrong chat: {REDACTED_TEXT}, ignore this", mark="oops"),
            Redact("jonas", "oops"),
            Say("jonas", "Deleted that, sorry, wrong window."),
            Edit(
                "maya",
                "workday",
                f"{EDITED_TO} from 10am (rain forecast on Saturday). We're rebuilding the raised beds by the fence and clearing the bramble corner.",
            ),
            Say(
                "maya",
                "Heads up: I moved the workday to Sunday because of the rain forecast, see the edited message above.",
            ),
        ],
        [
            Say("elif", "Someone left a green rain jacket on the hook by the front door, it's been there a week."),
            Say("sam", "That's mine! I'll grab it tomorrow, thanks."),
            Say("tomas", "Also found: a USB-C charger in the electronics corner and a single blue glove."),
        ],
        [
            Say(
                "tomas",
                "Reminder: the space is open Tuesday and Thursday evenings from 6 until 10, and Saturday afternoons.",
            ),
            Say("lena", "Could we add a Sunday morning slot in summer? A lot of people work late on weekdays."),
            Say("tomas", "Happy to if we find two keyholders willing to open up."),
            Say("ben", "I can do alternate Sundays."),
            Say("lena", "Me too, put me down for the other ones."),
        ],
        [
            Say("priya", "The bank changed our account, please update your standing order for the membership fee."),
            Say("jonas", "Is the fee still 15 a month, and 8 for concessions?"),
            Say("priya", "Yes, unchanged. I'll pin the new account details on the noticeboard, not here."),
        ],
    ],
    "garden": [
        [
            Say("maya", "The tomatoes in bed 3 need staking before the storm on Thursday."),
            Say("lena", "I'll bring bamboo canes and soft twine from the shed."),
            Say("elif", "There are brown spots on the lower leaves of the plum tomatoes, is that blight?"),
            Say(
                "maya",
                "Probably early blight. Pinch off the affected leaves and water at the base, never on the foliage.",
            ),
            Say("noor", "Mulching with straw helps too, it stops soil splashing up onto the leaves."),
        ],
        [
            Say("sam", "The compost bins are full and the left one smells sour."),
            Say("maya", "Too many grass clippings. Mix in cardboard and dry leaves, then turn it."),
            Say("ben", "I can bring a car load of shredded cardboard from work."),
            Say("sam", "Great, I'll turn both bins on Wednesday evening."),
        ],
        [
            Say("maya", "Summer watering rota: each plot holder takes one evening a week. Reply with your day."),
            Say("priya", "Monday for me."),
            Say("lena", "Wednesday."),
            Say("jonas", "I'm away in July, can someone swap with me?"),
            Say("noor", "I'll take Fridays and cover for Jonas in July."),
            Say("maya", "Please use the water butts first and only use the hose if they are empty."),
        ],
        [
            Say("elif", "The slugs ate every single lettuce seedling overnight."),
            Say("noor", "Beer traps work, or copper tape around the edge of the bed."),
            Say("lena", "Or go out with a torch after dark and collect them, it's oddly satisfying."),
            Say("maya", "Please no slug pellets, the hedgehogs under the hedge eat the slugs."),
        ],
        [
            Say("lena", "Seed swap next month in the greenhouse! Bring saved seeds in labelled envelopes."),
            Say(
                "priya",
                "I saved seeds from the heirloom Cherokee Purple tomatoes last autumn, dried them on kitchen paper.",
            ),
            Say("elif", "I have far too many runner bean seeds and some calendula."),
            Say("maya", "We'll set up a table by the door, bring envelopes and a pen."),
        ],
        [
            Say("ben", "The bees were very busy on the lavender this morning."),
            Say("noor", "The hive inspection is on Sunday, wear long sleeves if you want to watch."),
            Say("jonas", "Is there honey this year or is it too early?"),
            Say("noor", "Too early, we leave the first flow for the colony."),
        ],
    ],
    "infra": [
        [
            Say(
                "sam", "The internet keeps dropping in the workshop, every few minutes my laptop loses the connection."
            ),
            Say("tomas", "Which network, the members one or the guest one?"),
            Say(
                "sam",
                "Members. The browser just says ERR_CONN_RESET and then it comes back after a minute.",
                mark="err",
            ),
            Say("tomas", "The access point above the laser cutter is overheating again, its log shows it rebooting."),
            Say("priya", "Could we move it away from the extraction duct? That thing blows hot air all day."),
            Say(
                "tomas",
                "I'll remount it on the other wall on Thursday and put it on a channel the neighbours don't use.",
            ),
            Say("sam", "The upstairs desks get ERR_CONN_RESET too, so maybe it's the router and not the access point."),
            Say("tomas", "Opened ticket #4521 with the ISP about the line dropping at night."),
        ],
        [
            Say("jonas", "The Prusa is under-extruding, the first layer looks like lace."),
            Say("elif", "The nozzle is probably clogged, try a cold pull with nylon filament."),
            Say("jonas", "Cold pull fixed it. I also re-levelled the bed."),
            Say("elif", "Please log filament use in the spreadsheet so we know when to order more PLA."),
        ],
        [
            Say("ben", "The laser cutter won't fire, the water chiller shows a flow alarm."),
            Say(
                "tomas",
                "The chiller pump filter clogs when the water gets murky. Drain it and refill with distilled water.",
            ),
            Say("ben", "Done, it fires again. There was a lot of sludge in the tank."),
            Say("tomas", "Added 'change the chiller water monthly' to the maintenance calendar."),
        ],
        [
            Say("noor", "My badge hasn't opened the front door since Monday."),
            Say("tomas", "The badge reader lost its membership sync. I re-enrolled everyone who renewed this month."),
            Say("noor", "Works now, thanks!"),
        ],
        [
            Say("tomas", "Setting up the CI runner that deploys the members website."),
            Say("jonas", "Which token does it use to push to the repo?"),
            Say("tomas", f"here's the deploy token for the runner: {SECRETS['github_token']}"),
            Say("tomas", f"and the admin panel is password={SECRETS['password']} for now, I'll move it to the vault"),
            Say("priya", "Please don't paste tokens in chat, rotate that one."),
            Say("tomas", "You're right, rotated it and moved the new one to the password manager."),
        ],
        [
            Say("elif", "The fume extractor on the soldering bench rattles, I think the fan bearing is going."),
            Say("ben", "I have a spare 120mm fan, I'll swap it on Tuesday."),
        ],
    ],
    "bookclub": [
        [
            Say(
                "lena", "Finished Piranesi last night. The house with the tides flooding the halls is still in my head."
            ),
            Say("priya", "I loved how the journal entries slowly reveal who he is."),
            Say("noor", "It felt like a puzzle box, I reread the last chapter twice."),
            Say("elif", "I found the middle slow, but the ending made up for it."),
        ],
        [
            Say("lena", "What should we read next? Suggestions by Friday please."),
            Say("jonas", "The Overstory? It fits the garden crowd, it's all about trees and the people who love them."),
            Say("noor", "Braiding Sweetgrass, it weaves botany and indigenous knowledge together beautifully."),
            Say("priya", "Something shorter maybe, Klara and the Sun?"),
            Say("lena", "Let's vote: The Overstory, Braiding Sweetgrass or Klara and the Sun."),
            Say("ben", "Braiding Sweetgrass for me."),
            Say("elif", "Overstory, I've had it on my shelf for two years."),
            Say("lena", "Braiding Sweetgrass wins by one vote. Library has three copies."),
        ],
        [
            Say("lena", "Next meeting is Wednesday at 7 in the library room upstairs."),
            Say("ben", "I'll bring biscuits, can someone else bring tea?"),
            Say("elif", "I'll bring tea and the good mugs."),
        ],
    ],
    # Refused rooms: none of this may ever be stored.
    "dm": [
        [
            Say(
                "maya", "Hi huginn, can you keep this between us: I'm thinking of stepping down as garden coordinator."
            ),
            Say("maya", "Also my allotment neighbour keeps parking across the gate, I'd rather not say who in public."),
        ]
    ],
    "discord": [
        [
            Say("tomas", "relayed from Discord: anyone selling a second hand soldering station with a hot air gun?"),
            Say("sam", "relayed from Discord: the makers server is moving its meetup to the riverside pub."),
        ]
    ],
    "gaming": [
        [
            Say("ben", "Gaming night this Friday, bring your own controller."),
            Say(PUPPET_LOCALPART, "gg everyone, the co-op campaign was brilliant, same time next week?"),
            Say("sam", "Count me in for the board game marathon after."),
        ]
    ],
    "board": [
        [
            Encrypted("priya"),
            Say("priya", "Board minutes draft: the landlord wants to raise the rent by twelve percent from October."),
            Encrypted("tomas"),
        ]
    ],
    "members": [
        [
            Say("priya", "Membership export for the annual general meeting: forty two paid members, six in arrears."),
            Say("maya", "Please don't forward the arrears list, it's confidential."),
        ]
    ],
}

# Small talk between threads, drawn with the seed. Real sentences, none on a searched topic.
SMALL_TALK: dict[str, list[str]] = {
    "general": [
        "Morning all!",
        "Anyone at the space tonight?",
        "I'll be in around seven.",
        "Thanks everyone, great evening.",
        "The kettle in the kitchen is descaled, finally.",
        "Who left the back window open? It's freezing in here.",
        "There's leftover cake in the fridge, help yourselves.",
        "Welcome to the two new members who joined this week!",
        "Is the parking behind the building free on Saturdays?",
        "Does anyone know a good bike repair place nearby?",
        "The recycling goes out tonight, can the last person take the bins out?",
        "Lovely sunset over the river right now.",
        "Running late, save me a seat.",
        "The noticeboard by the door has the new events poster.",
        "Anyone interested in a repair café once a month?",
        "I can bring the projector for the film night.",
        "The radiator in the big room is making that noise again.",
        "Whoever baked the lemon drizzle, it was perfect.",
        "Has anyone got a spare padlock for the bike shed?",
        "Thanks for tidying the kitchen, whoever that was.",
    ],
    "garden": [
        "The broad beans are flowering.",
        "Picked the first strawberries today, tiny but sweet.",
        "Does anyone want rhubarb? Way too much in plot 7.",
        "The greenhouse door sticks, lift it slightly when you close it.",
        "The herb spiral needs weeding, I'll do a bit on Saturday.",
        "Squash plants are taking over the path again.",
        "I left some spare leek seedlings on the bench, free to a good home.",
        "Frost warning tonight, cover the tender plants.",
        "The robin is back on the fork handle.",
        "Who planted the sunflowers along the fence? They look amazing.",
        "Lovely morning to be in the garden.",
        "The new rain gauge says 12mm since yesterday.",
        "I'm sowing another row of carrots this week.",
        "Please close the gate, the foxes get in otherwise.",
    ],
    "infra": [
        "The label printer is out of tape.",
        "Ordered more M3 bolts, they should arrive on Thursday.",
        "Someone left the bandsaw unplugged mid job, is that finished?",
        "The whiteboard markers are all dead.",
        "The new drill press is set up in the corner.",
        "Please sweep up after using the lathe.",
        "The sewing machine needs a new needle, I'll bring some.",
        "The oscilloscope is back from calibration.",
        "Reminder: induction for the CNC router is on Saturday.",
        "I fixed the wobbly workbench leg.",
        "The vinyl cutter software needs an update, I'll do it tonight.",
        "Added a shelf for members' project boxes.",
    ],
    "bookclub": [
        "Has anyone read anything good lately outside the club?",
        "The library sale is on next weekend.",
        "I'm halfway through, no spoilers please!",
        "Audiobook counts, right?",
        "That was a lovely evening, thanks all.",
        "I'll bring my copy for anyone who wants to borrow it.",
        "The café downstairs now stays open until eight.",
        "Can we do a poetry month sometime?",
    ],
}
# Short exchanges made from templates and fills, so the small talk does not repeat itself. In a
# template, {a} and {b} stand for two different members of the room; other fields draw from FILLS.
EXCHANGES: dict[str, list[tuple[tuple[str, str], ...]]] = {
    "general": [
        (
            ("a", "Can anyone open up on {day} evening? I'm {excuse}."),
            ("b", "I can do {day}, I'll be there from {time}."),
        ),
        (
            ("a", "Is anyone going to the {shop} this week? We're out of {supply}."),
            ("b", "I'm going on {day}, I'll pick some up."),
        ),
        (("a", "The big room is booked on {day} for {event}, please keep the noise down."),),
        (("a", "Thanks {b} for {deed}!"), ("b", "{welcome}")),
        (("a", "Does anyone know a good {trade} nearby? {trade_reason}"), ("b", "{trade_tip}")),
    ],
    "garden": [
        (("a", "Harvested {amount} of {crop} from plot {plot} today, {comment}."),),
        (("a", "Can someone water plot {plot} on {day}? I'm {excuse}."), ("b", "{ok}")),
        (("a", "Does anyone have spare {garden_supply}? Mine ran out halfway through the bed."), ("b", "{shed}")),
        (("a", "The {crop} in plot {plot} are {crop_state}."),),
    ],
    "infra": [
        (("a", "Borrowed the {tool} for {project}, I'll bring it back on {day}."),),
        (
            ("a", "The {machine} is booked {day} evening for {project}."),
            ("b", "Can I have the slot after you? I need it for {other_project}."),
        ),
        (
            ("a", "Has anyone seen the {small_item}? It's not in its drawer."),
            ("b", "Try the {place}, that's where things end up."),
        ),
        (("a", "Finished {project} today, photos on the noticeboard."), ("b", "{praise}")),
    ],
    "bookclub": [
        (("a", "I'm {progress} through {book} and {reaction}."),),
        (("a", "Has anyone read {book}?"), ("b", "Yes, {reaction_short}, happy to lend you my copy.")),
    ],
}
FILLS: dict[str, tuple[str, ...]] = {
    "welcome": ("Happy to help.", "Any time!", "It was overdue anyway.", "You're welcome, it was fun."),
    "ok": (
        "Sure, I'll do it on my way home.",
        "Can do, I'm there anyway.",
        "Yes, leave the key in the usual place.",
        "I'll take it.",
    ),
    "shed": (
        "There's some in the shed, top shelf on the left.",
        "I've got plenty, I'll leave some by the gate.",
        "Ask Maya, she bought a big roll last week.",
    ),
    "crop_state": (
        "finally ripening",
        "bolting in this heat",
        "covered in blackfly",
        "coming along nicely",
        "ready to pick, help yourselves",
    ),
    "praise": (
        "That looks brilliant!",
        "Nice work, the joints are really clean.",
        "Great job, bring it to show and tell.",
        "Wow, how long did that take?",
    ),
    "trade": ("bike repair shop", "locksmith", "tailor", "electrician", "plumber"),
    "trade_reason": ("Mine closed down.", "Asking for a friend.", "The last one was far too expensive."),
    "trade_tip": (
        "The one by the station is good and not expensive.",
        "Try the place on Mill Lane, ask for Dev.",
        "Post on the noticeboard, a member might do it for cake.",
    ),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "time": ("six", "half six", "seven", "eight"),
    "excuse": ("stuck at work", "at my sister's", "on a late shift", "away for the weekend", "at the dentist"),
    "shop": ("hardware store", "cash and carry", "market", "garden centre"),
    "supply": ("bin bags", "washing up liquid", "tea bags", "toilet roll", "milk", "printer paper"),
    "event": ("the repair café", "a birthday party", "the film night", "a beginners' electronics class", "the AGM"),
    "deed": (
        "fixing the door hinge",
        "cleaning the fridge",
        "the banana bread",
        "sorting the lost property box",
        "mending the noticeboard",
    ),
    "amount": ("two kilos", "a basket", "a bucket", "a handful", "a whole crate"),
    "crop": ("courgettes", "runner beans", "potatoes", "raspberries", "chard", "beetroot", "onions", "kale"),
    "plot": ("2", "4", "5", "7", "9", "11", "12"),
    "comment": (
        "more than we can eat",
        "best year so far",
        "help yourselves from the bench",
        "the rain really helped",
        "a few nibbled by something",
    ),
    "garden_supply": ("twine", "plant labels", "bird netting", "chicken manure pellets", "fleece"),
    "tool": ("heat gun", "multimeter", "angle grinder", "jigsaw", "bench vice", "hot glue gun", "crimping tool"),
    "project": (
        "the kids' robot club",
        "a bird box",
        "a bike trailer",
        "my kitchen shelves",
        "a synth kit",
        "the seed library cabinet",
        "a lamp",
    ),
    "machine": ("lathe", "CNC router", "laser cutter", "embroidery machine", "vinyl cutter"),
    "small_item": ("digital caliper", "flush cutters", "torx screwdriver set", "tape measure", "soldering tip cleaner"),
    "place": ("electronics corner", "lost property box", "kitchen windowsill", "bottom of the tool wall"),
    "progress": ("a third of the way", "halfway", "nearly all the way", "only a few chapters in"),
    "book": (
        "The Left Hand of Darkness",
        "Station Eleven",
        "The Remains of the Day",
        "Circe",
        "The Dispossessed",
        "A Psalm for the Wild-Built",
        "Never Let Me Go",
    ),
    "reaction": (
        "I can't put it down",
        "I'm not sure I like the narrator",
        "the ending already worries me",
        "it's slower than I expected",
        "I keep underlining sentences",
    ),
    "reaction_short": ("loved it", "a bit slow at first", "one of my favourites", "it stayed with me for weeks"),
}
EXCHANGES_PER_ROOM = {"general": 20, "garden": 18, "infra": 18, "bookclub": 8}
SMALL_TALK_BETWEEN_THREADS = (2, 4)

# The chat happens over four weeks of spring 2025 (12 April 2025 is a Saturday, as the workday
# announcement says). Messages of one thread or exchange follow each other within minutes; quiet
# hours lie between them, so the refresher's windows close where the conversation pauses.
TIMELINE_START_MS = 1742803200000  # 2025-03-24 08:00 UTC
TIMELINE_SPAN_MS = 26 * 24 * 3600 * 1000
REPLY_DELAY_S = (30, 420)
WAKING_HOURS_UTC = (7, 23)


def _exchange(rng: random.Random, room: Room, number: int) -> list[Say]:
    templates = EXCHANGES[room.key]
    template = templates[number % len(templates)]  # every template in turn: no run of one kind
    a, b = rng.sample(room.members, 2)
    fills = {name: rng.choice(options) for name, options in FILLS.items()}
    fills["other_project"] = rng.choice([p for p in FILLS["project"] if p != fills["project"]])
    fills.update(a=a.capitalize(), b=b.capitalize())
    return [Say(a if role == "a" else b, text.format(**fills)) for role, text in template]


def conversation(seed: int = SEED) -> dict[str, list[Step]]:
    """Every room's steps in sending order: its threads, with small talk drawn from ``seed``
    before, between and after them. The same seed always gives the same conversation, and no
    sentence of small talk is said twice in a room."""
    rng = random.Random(seed)
    plan: dict[str, list[Step]] = {}
    for room in ROOMS:
        small_talk = SMALL_TALK.get(room.key, [])
        fillers: list[list[Say]] = [[Say(rng.choice(room.members), text)] for text in small_talk]
        seen = set(small_talk)
        wanted = len(small_talk) + EXCHANGES_PER_ROOM.get(room.key, 0)
        attempts = 0
        while len(fillers) < wanted and attempts < 500:
            attempts += 1
            talk = _exchange(rng, room, attempts)
            if talk[0].text not in seen:
                seen.add(talk[0].text)
                fillers.append(talk)
        rng.shuffle(fillers)

        blocks: list[list[Step]] = []
        for thread in THREADS[room.key]:
            for _ in range(rng.randint(*SMALL_TALK_BETWEEN_THREADS) if fillers else 0):
                if fillers:
                    blocks.append(list(fillers.pop()))
            blocks.append(list(thread))
        blocks += [list(filler) for filler in fillers]
        plan[room.key] = _timed(rng, blocks)
    return plan


def _timed(rng: random.Random, blocks: list[list[Step]]) -> list[Step]:
    """The blocks' steps with timestamps: minutes apart within a block, hours between blocks."""
    mean_gap_ms = TIMELINE_SPAN_MS // max(1, len(blocks))
    now = TIMELINE_START_MS + rng.randint(0, 12 * 3600) * 1000
    steps: list[Step] = []
    for block in blocks:
        now += int(mean_gap_ms * rng.uniform(0.3, 1.7))
        hour = (now // 3_600_000) % 24
        if not WAKING_HOURS_UTC[0] <= hour < WAKING_HOURS_UTC[1]:
            now += 8 * 3_600_000  # nobody posts about compost at 3 am
        for position, step in enumerate(block):
            if position:
                now += rng.randint(*REPLY_DELAY_S) * 1000
            steps.append(step if isinstance(step, Redact) else dataclasses.replace(step, at_ms=now))
    return steps


# ---------------------------------------------------------------------------------------------
# Steps


class DemoFailed(OperationalError):
    """A step failed. ``detail`` is what helps (a log tail, a command's stderr), never a token."""

    def __init__(self, step: str, message: str, detail: str = ""):
        super().__init__(f"{step}: {message}")
        self.step = step
        self.message = message
        self.detail = detail


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so the teardown in ``finally`` runs."""


@dataclass
class Community:
    room_ids: dict[str, str] = field(default_factory=dict)  # room key -> room id
    events: dict[str, str] = field(default_factory=dict)  # mark -> event id
    messages_sent: int = 0
    service_token: str = field(default="", repr=False)

    def name_of(self, room_id: str) -> str:
        for room in ROOMS:
            if self.room_ids.get(room.key) == room_id:
                return room.alias() or (f"DM with @{room.members[0]}" if room.kind == "dm" else room.title)
        return room_id


class _Console:
    """The demo's printer: numbered section headers and indented lines."""

    def __init__(self, out: TextIO):
        self.out = out
        self.section = 0

    def header(self, title: str) -> None:
        self.section += 1
        text = f" {self.section}. {title} "
        self.out.write(f"\n=={text}{'=' * max(4, 76 - len(text))}\n")
        self.out.flush()

    def line(self, text: str = "", indent: int = 2) -> None:
        pad = " " * indent
        self.out.write("\n".join(pad + part if part else "" for part in text.split("\n")) + "\n")
        self.out.flush()

    def command(self, argv: Sequence[str]) -> None:
        self.out.write("\n  $ " + " ".join(shlex.quote(arg) for arg in argv) + "\n")
        self.out.flush()


def _demo_dir() -> Path:
    # Synapse commits SQLite on every send: tmpfs makes seeding ~3x faster.
    shm = Path("/dev/shm")
    parent = shm if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="huginn-demo-", dir=parent))


def seed_community(server: Any, plan: dict[str, list[Step]]) -> Community:  # noqa: C901 - the seeding as one script, step by step
    """Register the people and the service user, make the rooms, send every room's steps (each
    room in order, the rooms side by side). The service user is only invited where a room is
    private; the refresher joins the rest itself, as it would in production. The operator has put
    the service user in #gaming-night by hand."""
    people = sorted(
        {step.speaker for steps in plan.values() for step in steps if not step.speaker.startswith("_")}
        | {m for room in ROOMS for m in room.members}
    )
    with ThreadPoolExecutor(max_workers=8) as pool:
        accounts = dict(zip(people, pool.map(server.register, people)))
        service = server.register(SERVICE_USER)
    actors = {name: server.actor(account) for name, account in accounts.items()}
    # The same people, speaking through the history appservice: their sends carry a timestamp.
    speakers = {name: server.history_actor(account) for name, account in accounts.items()}
    actors[PUPPET_LOCALPART] = speakers[PUPPET_LOCALPART] = server.actor(server.puppet(PUPPET_LOCALPART))
    community = Community(service_token=service.access_token)

    def make_room(room: Room) -> str:
        owner = actors[room.members[0]]
        if room.kind == "dm":
            room_id = owner.create_room(preset="trusted_private_chat", is_direct=True, invite=[service.user_id])
        else:
            private = room.kind in ("encrypted", "members_only")
            room_id = owner.create_room(
                name=room.title,
                alias_localpart=room.alias_localpart,
                preset="private_chat" if private else "public_chat",
                invite=[service.user_id] if private else [],
                encrypted=room.kind == "encrypted",
            )
        if room.kind == "bridge_state":
            # A portal of a public Discord channel, readable by anyone: its bridge state shows
            # before a join, so the refresher refuses it without joining (and announcing itself).
            owner.send_state(room_id, "m.room.history_visibility", "", {"history_visibility": "world_readable"})
            owner.send_state(
                room_id,
                "m.bridge",
                "discord/makers",
                {
                    "bridgebot": f"@discordbot:{SERVER_NAME}",
                    "protocol": {"id": "discord", "displayname": "Discord"},
                    "channel": {"id": "makers", "displayname": "#makers"},
                },
            )
        for member in room.members[1:]:
            if room.kind in ("encrypted", "members_only"):
                owner.invite(room_id, accounts[member].user_id)
            actors[member].join(room_id)
        if room.kind == "puppet":
            actors[PUPPET_LOCALPART].join(room_id)
            # The operator had put the service user in this room by hand: its bridged puppet shows
            # only from inside, so the refresher refuses it there, and leaves it to the operator.
            server.actor(service).join(room_id)
        return room_id

    def send_room(room: Room) -> int:
        room_id = community.room_ids[room.key]
        sent = 0
        for step in plan[room.key]:
            speaker = speakers[step.speaker]
            if isinstance(step, Say):
                event_id = speaker.send_text(room_id, step.text, ts=step.at_ms)
                if step.mark:
                    community.events[step.mark] = event_id
            elif isinstance(step, Edit):
                speaker.send_edit(room_id, community.events[step.mark], step.text, ts=step.at_ms)
            elif isinstance(step, Redact):
                actors[step.speaker].redact(room_id, community.events[step.mark], reason="posted in the wrong chat")
            elif isinstance(step, Encrypted):
                speaker.send_encrypted(room_id, ts=step.at_ms)
            sent += 1
        return sent

    pool = ThreadPoolExecutor(max_workers=len(ROOMS))
    try:
        for room, room_id in zip(ROOMS, pool.map(make_room, ROOMS)):
            community.room_ids[room.key] = room_id
        community.messages_sent = sum(pool.map(send_room, ROOMS))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return community


def refresh_env(base: Path, server: Any, community: Community) -> dict[str, str]:
    token_file = base / "matrix-token"
    token_file.write_text(community.service_token + "\n")
    token_file.chmod(0o600)
    rooms = [room.alias() or community.room_ids[room.key] for room in ROOMS]
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
        "HUGINN_CHAT_HOMESERVER": server.base_url,
        "HUGINN_CHAT_TOKEN_FILE": str(token_file),
        "HUGINN_CHAT_ROOMS": json.dumps(rooms),
        "HUGINN_CHAT_STATE_DIR": str(base / "state"),
        "HUGINN_CHAT_SOCKET": str(base / "reader.sock"),
    }


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "daemon.cli.main", *args]


def _journal(stderr: str) -> list[dict[str, Any]]:
    lines = []
    for raw in stderr.splitlines():
        if raw.startswith("{"):
            try:
                lines.append(json.loads(raw))
            except ValueError:
                pass
    return lines


def print_refresh(console: _Console, lines: list[dict[str, Any]], community: Community) -> dict[str, Any]:
    """The run as an operator reads it (the product's own terminal summary); returns the run summary."""

    def name_of(line: dict[str, Any]) -> str:
        return community.name_of(line["room_id"]) if line.get("room_id") else str(line.get("alias", ""))

    for text in render_run(lines, name_of):
        console.line(text)
    for line in lines:
        if line.get("level") in ("error", "critical") and line.get("event") != "room_failed":
            console.line(f"ERROR    {line.get('event')}: {line.get('why', '')} {line.get('error', '')}".rstrip())
    return next((line for line in lines if line.get("event") == "run_finished"), None) or {}


class _Reader:
    """``huginn-chat serve`` as a child process in its own session, stopped with SIGTERM."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.env = env
        self.socket = env["HUGINN_CHAT_SOCKET"]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                _cli("serve"),
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # Ctrl-C goes to the demo, which stops the reader in order
            )

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise DemoFailed(
                    "reader", f"huginn-chat serve exited with code {self.process.returncode}", self.log_tail()
                )
            try:
                reply = exchange(self.socket, {"v": 1, "op": "status"}, timeout=5)
            except ReaderUnavailable as exc:
                last = str(exc)
            else:
                if reply.get("ok") and reply["result"].get("index_ready"):
                    return reply["result"]
                last = json.dumps(reply.get("result") or reply.get("error"))
            time.sleep(0.1)
        raise DemoFailed("reader", f"not ready after {timeout:.0f} s ({last})", self.log_tail())

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            stop_process(process, STOP_GRACE_S)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no reader log)"


@dataclass(frozen=True)
class Search:
    title: str
    texts: tuple[str, ...]
    expect_room: str  # room key whose window must be among the hits
    rooms: tuple[str, ...] = ()  # --room filters (room keys)
    top_k: int = 2


SEARCHES: tuple[Search, ...] = (
    Search("By meaning", ("who is bringing tools to the workday",), "general"),
    Search("By meaning", ("problems with the wifi",), "infra"),
    Search("By exact word: an error code", ("ERR_CONN_RESET",), "infra"),
    Search("By exact word: a ticket number", ("#4521",), "infra", top_k=1),
    Search("Several texts at once (fused)", ("seed swap", "saving seeds from heirloom tomatoes"), "garden"),
    Search("Filtered to one room", ("what should we read next",), "bookclub", rooms=("bookclub",)),
    Search("The pasted credentials", ("deploy token for the CI runner",), "infra", top_k=1),
)


def run_demo(out: TextIO = sys.stdout, keep: bool = False, stay: bool = False) -> int:  # noqa: C901 - the story in order, and each way it ends
    """The whole demo. Returns the exit code: 0 every step worked, 1 a step failed (the message
    names it), 130 interrupted. ``keep`` leaves the temporary directory (homeserver log, index,
    reader log) in place for a look afterwards; the processes are stopped. ``stay`` (``make try``)
    leaves the homeserver and the reader running after a successful run, with the directory, and
    prints the lines to paste into a shell and the one that stops them."""
    console = _Console(out)
    started = time.monotonic()
    timings: dict[str, float] = {}
    base = _demo_dir()
    server: Any = None
    reader: _Reader | None = None
    left_running: list[bool] = []
    restore = _install_sigterm()

    def timed(name: str, action: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        try:
            return action()
        finally:
            timings[name] = time.monotonic() - t0

    try:
        from devtools.synapse import SynapseServer

        console.header("Start a throwaway Synapse")
        console.line(f"working directory {base} ({'kept' if keep else 'removed'} at the end)")
        server = SynapseServer(data_dir=base / "synapse", server_name=SERVER_NAME, history_appservice=True)
        try:
            timed("synapse", server.start)
        except Exception as exc:  # noqa: BLE001 - reported as the step's failure
            raise DemoFailed("synapse", str(exc).splitlines()[0], server.log_tail()) from None
        console.line(f"Synapse is up on {server.base_url} (server name {SERVER_NAME})")

        console.header("Seed the Riverside Commons community")
        plan = conversation()
        community = timed("seeding", lambda: seed_community(server, plan))
        width = max(len(_room_label(room)) for room in ROOMS)
        for room in ROOMS:
            count = sum(isinstance(step, (Say, Encrypted)) for step in plan[room.key])
            what = f"{_room_label(room):<{width}}"
            note = {
                "dm": "direct chat with the service user",
                "bridge_state": "bridged to Discord (m.bridge)",
                "puppet": f"a Discord puppet (@{PUPPET_LOCALPART}) is a member; the operator joined "
                f"@{SERVICE_USER} here",
                "encrypted": "end-to-end encrypted",
                "members_only": "#members: excluded by default",
            }.get(room.kind, "")
            console.line(f"{what}  {count:>3} messages  {note}".rstrip())
        console.line()
        console.line("also: a pasted GitHub token and a password=… line in #infra, an edited announcement and a")
        console.line("deleted message in #general.")
        console.line(f"{community.messages_sent} events sent in {timings['seeding']:.1f} s")

        env = refresh_env(base, server, community)
        console.header("Refresh: huginn-chat refresh (what systemd's timer runs)")
        console.line("ROOMS lists every room above. The scope still refuses what it must:")
        proc = timed(
            "refresh",
            lambda: subprocess.run(
                _cli("refresh"), env=env, cwd=REPO, capture_output=True, text=True, timeout=REFRESH_TIMEOUT_S
            ),
        )
        lines = _journal(proc.stderr)
        summary = print_refresh(console, lines, community)
        if proc.returncode != 0 or not summary:
            raise DemoFailed("refresh", f"huginn-chat refresh exited with code {proc.returncode}", proc.stderr[-3000:])
        refused = {line.get("room_id"): line.get("reason") for line in lines if line.get("event") == "room_refused"}
        for key, reason in REFUSED_ROOMS.items():
            if refused.get(community.room_ids[key]) != reason:
                raise DemoFailed(
                    "refresh",
                    f"{community.name_of(community.room_ids[key])} was not refused as {reason!r} "
                    f"(got {refused.get(community.room_ids[key])!r})",
                )
        console.line("(each line comes from the JSON journal; e.g. journalctl -u huginn-chat-refresh -o cat |")
        console.line(" jq 'select(.event==\"room_refused\")' shows the full evidence)")
        _check_joined(console, server, community)

        console.header("Start the reader: huginn-chat serve")
        reader = _Reader(env, base / "reader.log")
        reader.start()
        status = timed("reader", lambda: reader.wait_ready(READER_READY_TIMEOUT_S))
        console.line(
            f"listening on {env['HUGINN_CHAT_SOCKET']} after {timings['reader']:.1f} s: "
            f"generation {status.get('generation')}, model {status.get('model')}, embedder {status.get('embedder')}"
        )
        console.line("Personas search it with the CLI (HUGINN_CHAT_SOCKET points at the socket):")

        client_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("HUGINN_CHAT_")},
            "HUGINN_CHAT_SOCKET": env["HUGINN_CHAT_SOCKET"],
        }
        t0 = time.monotonic()
        for search in SEARCHES:
            _run_search(console, search, community, client_env)
        window_event = _window_target(community, client_env)
        console.header("A cited message and its neighbours: huginn-chat window")
        console.line("the event id comes from the ERR_CONN_RESET hit above")
        _run_shown(console, ["window", window_event, "--before", "3", "--after", "3"], client_env, step="window")
        console.header("A listing, oldest first: huginn-chat search (no text)")
        _run_shown(console, ["search", "--top-k", "2"], client_env, step="listing")
        timings["searches"] = time.monotonic() - t0

        console.header("What the index holds (every window, paged through the reader)")
        timed("checks", lambda: _check_index(console, community, client_env))

        console.header("The rooms a Persona can search: huginn-chat rooms (from the reader, no token)")
        _run_shown(console, ["rooms"], client_env, step="rooms")

        console.header("The operator's view: huginn-chat scope and huginn-chat status")
        console.line("scope recomputes every decision from the homeserver and writes nothing:")
        _run_shown(console, ["scope"], env, step="scope")
        _run_shown(console, ["status"], env, step="status")

        console.header("Done")
        total = time.monotonic() - started
        console.line(
            f"total {total:.1f} s: Synapse start {timings['synapse']:.1f} s, seeding {timings['seeding']:.1f} s, "
            f"refresh {timings['refresh']:.1f} s (the run itself {summary.get('seconds', 0):.1f} s, the rest is start-up), "
            f"reader start {timings['reader']:.1f} s, searches {timings['searches']:.1f} s"
        )
        synapse_pid = server.detach() if stay and reader.process is not None else None
        if stay and reader.process is not None and synapse_pid is not None:
            _print_try_lines(console, client_env, base, [reader.process.pid, synapse_pid])
            left_running.append(True)  # on purpose: the finally below stops nothing
            keep = True
        return EXIT_OK
    except DemoFailed as exc:
        out.write(f"\nDEMO FAILED at step '{exc.step}': {exc.message}\n")
        if exc.detail:
            out.write("  " + exc.detail.replace("\n", "\n  ") + "\n")
        return EXIT_FAILED
    except (KeyboardInterrupt, _Terminated):
        out.write("\ninterrupted: tearing down\n")
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a demo must end with a message, not a traceback
        out.write(f"\nDEMO FAILED: {type(exc).__name__}: {exc}\n")
        return EXIT_FAILED
    finally:
        try:
            if reader is not None and not left_running:
                reader.stop()
            if server is not None and not left_running:
                server.stop()
        finally:
            if keep:
                out.write(f"\nkept {base} (homeserver.log, state/, reader.log); remove it when done\n")
            else:
                shutil.rmtree(base, ignore_errors=True)
            restore()
            out.flush()


def _print_try_lines(console: _Console, client_env: dict[str, str], base: Path, pids: list[int]) -> None:
    """What ``make try`` leaves: the lines a shell needs to search the running reader, and the
    one line that stops the reader and the homeserver and removes their directory."""
    console.header("Still running: try it yourself")
    console.line("paste these two lines into a shell, then run huginn-chat rooms, search, window, thread:")
    console.line(f"export HUGINN_CHAT_SOCKET={client_env['HUGINN_CHAT_SOCKET']}")
    console.line(f"export PATH={Path(sys.executable).parent}:$PATH")
    console.line("for example: huginn-chat search the wifi keeps dropping")
    console.line("stop it all and remove its files with:")
    # Wait (at most 10 s) for them to exit before removing their files: a reader still closing
    # its copy of the index would leave a directory behind.
    alive = " || ".join(f"kill -0 {pid} 2>/dev/null" for pid in pids)
    console.line(
        f"kill {' '.join(str(pid) for pid in pids)} && "
        f"for i in $(seq 100); do {{ {alive}; }} || break; sleep 0.1; done; rm -rf {base}"
    )


def _check_joined(console: _Console, server: Any, community: Community) -> None:
    """The service user's rooms as the homeserver reports them: only admitted rooms, and the room
    the operator had put it in. A refused room the refresher joined would show here."""
    from devtools.synapse import Account

    service = server.actor(Account(f"@{SERVICE_USER}:{SERVER_NAME}", community.service_token))
    joined = set(service.call("GET", "/_matrix/client/v3/joined_rooms")["joined_rooms"])
    names = sorted(community.name_of(room_id) for room_id in joined)
    console.line(f"@{SERVICE_USER} is now joined to: {', '.join(names)}")
    expected = {community.room_ids[key] for key in (*ADMITTED_ROOMS, OPERATOR_JOINED)}
    if joined != expected:
        extra = sorted(community.name_of(room_id) for room_id in joined - expected)
        missing = sorted(community.name_of(room_id) for room_id in expected - joined)
        raise DemoFailed("refresh", f"the service user's rooms are wrong: extra {extra}, missing {missing}")


def _install_sigterm() -> Callable[[], None]:
    """SIGTERM raises ``_Terminated`` in the main thread so teardown runs; returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def on_sigterm(signum: int, frame: Any) -> None:
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, on_sigterm)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _run_cli(args: Sequence[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_cli(*args), env=env, cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def _run_shown(console: _Console, args: Sequence[str], env: dict[str, str], *, step: str) -> str:
    """Run a CLI command, print it and its human output; fail the step on a non-zero exit."""
    console.command(["huginn-chat", *args])
    proc = _run_cli(args, env)
    text = proc.stdout.rstrip("\n")
    if proc.stderr.strip():
        text = (text + "\n" if text else "") + proc.stderr.rstrip("\n")
    console.line(text, indent=4)
    if proc.returncode != 0:
        raise DemoFailed(step, f"huginn-chat {' '.join(args[:1])} exited with code {proc.returncode}")
    return proc.stdout


def _run_search(console: _Console, search: Search, community: Community, env: dict[str, str]) -> None:
    room_filters = [alias for key in search.rooms if (alias := _room(key).alias())]
    args = ["search", search.texts[0], *(a for more in search.texts[1:] for a in ("--text", more))]
    args += ["--top-k", str(search.top_k)]
    for alias in room_filters:
        args += ["--room", alias]
    console.header(f"{search.title}: {' + '.join(repr(t) for t in search.texts)}")
    output = _run_shown(console, args, env, step="search")
    expected = _room(search.expect_room).alias() or ""
    # A hit's header line: "[n] <room name> (<alias>, <room id>)  score ...".
    if not any(line.startswith("[") and f" ({expected}, " in line for line in output.splitlines()):
        raise DemoFailed("search", f"no hit from {expected} for {list(search.texts)}")


def _room_label(room: Room) -> str:
    return f"{room.alias() or 'DM'}  {room.title or '@maya <-> @huginn'}"


def _room(key: str) -> Room:
    return next(room for room in ROOMS if room.key == key)


def _window_target(community: Community, env: dict[str, str]) -> str:
    """The event id of the ERR_CONN_RESET message, as a Persona would copy it from a hit."""
    proc = _run_cli(["search", "ERR_CONN_RESET", "--top-k", "1", "--json"], env)
    if proc.returncode != 0:
        raise DemoFailed("window", f"search --json exited with code {proc.returncode}", proc.stderr)
    for hit in json.loads(proc.stdout)["hits"]:
        for message in hit["messages"]:
            if "ERR_CONN_RESET" in message["body"]:
                return message["event_id"]
    raise DemoFailed("window", "no stored message contains ERR_CONN_RESET")


def _all_windows(env: dict[str, str]) -> list[dict[str, Any]]:
    windows: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        args = ["search", "--top-k", "50", "--json"] + (["--cursor", cursor] if cursor else [])
        proc = _run_cli(args, env)
        if proc.returncode != 0:
            raise DemoFailed("checks", f"listing exited with code {proc.returncode}", proc.stderr)
        page = json.loads(proc.stdout)
        windows += page["hits"]
        cursor = page.get("next")
        if not cursor:
            return windows


def _check_index(console: _Console, community: Community, env: dict[str, str]) -> None:
    windows = _all_windows(env)
    bodies = [message["body"] for window in windows for message in window["messages"]]
    text = "\n".join(bodies)
    room_names = sorted({community.name_of(window["room_id"]) for window in windows})
    console.line(f"{len(windows)} windows, {len(bodies)} messages, from {', '.join(room_names)}")

    refused_text = [
        step.text for key in REFUSED_ROOMS for steps in THREADS[key] for step in steps if isinstance(step, Say)
    ]
    checks = [
        (
            "no message from the DM, the bridged rooms, the encrypted room or #members is stored",
            not any(line in text for line in refused_text)
            and not ({community.room_ids[key] for key in REFUSED_ROOMS} & {w["room_id"] for w in windows}),
        ),
        (
            "no message sent by the Discord puppet is stored",
            not any(PUPPET_LOCALPART in m["sender"] for w in windows for m in w["messages"]),
        ),
        (
            "the pasted GitHub token and password are stored only as " + ", ".join(sorted(set(_markers(text)))),
            all(secret not in text for secret in SECRETS.values()) and "[redacted:" in text,
        ),
        ("the deleted message is not stored", REDACTED_TEXT not in text),
        ("the edited announcement is stored in its new wording only", EDITED_TO in text and EDITED_FROM not in text),
    ]
    failed = [claim for claim, ok in checks if not ok]
    for claim, ok in checks:
        console.line(f"{'ok ' if ok else 'NOT'} {claim}")
    if failed:
        raise DemoFailed("checks", f"{len(failed)} check(s) failed: {'; '.join(failed)}")


def _markers(text: str) -> list[str]:
    found = []
    start = text.find("[redacted:")
    while start != -1:
        end = text.find("]", start)
        found.append(text[start : end + 1])
        start = text.find("[redacted:", end)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, index) afterwards")
    parser.add_argument(
        "--try",
        dest="stay",
        action="store_true",
        help="leave the homeserver and the reader running afterwards and print how to use and stop them",
    )
    args = parser.parse_args(argv)
    return run_demo(sys.stdout, keep=args.keep, stay=args.stay)


if __name__ == "__main__":
    sys.exit(main())
