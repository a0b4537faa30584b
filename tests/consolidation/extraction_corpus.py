"""A labelled quality set for offline extraction: conversation turns and the pins a careful
reader would propose from each (docs/extraction.md). Categories:

* ``explicit`` — the user states something about themselves or asks to remember it;
* ``question``, ``hypothetical``, ``assistant`` (the assistant's words, however pin-like),
  ``secret``, ``negation`` (negated, taken back or joked) and ``chatter`` — nothing to propose.

Each case is ``(category, role, text, expected bodies)``. Expected bodies are compared
case- and whitespace-insensitively (trailing ``.``/``!`` ignored), as the gate compares
duplicates. The labels were written from what the text says, not from what the offline
harness does: the misses it has are part of the recall figure in docs/extraction.md.
"""

from __future__ import annotations

Case = tuple[str, str, str, tuple[str, ...]]

CASES: list[Case] = [
    # --- explicit statements -----------------------------------------------------------
    ("explicit", "user", "Remember that my deploy region is eu-west-1.", ("My deploy region is eu-west-1",)),
    ("explicit", "user", "I prefer metric units.", ("I prefer metric units",)),
    ("explicit", "user", "Call me Sam.", ("Call me Sam",)),
    ("explicit", "user", "My favourite editor is vim", ("My favourite editor is vim",)),
    ("explicit", "user", "Please remember that I am vegetarian.", ("I am vegetarian",)),
    ("explicit", "user", "btw my timezone is Europe/Lisbon", ("My timezone is Europe/Lisbon",)),
    (
        "explicit",
        "user",
        "I really prefer short answers without bullet points.",
        ("I really prefer short answers without bullet points",),
    ),
    (
        "explicit",
        "user",
        "Remember that we decided to use PostgreSQL 16 for the new service.",
        ("We decided to use PostgreSQL 16 for the new service",),
    ),
    ("explicit", "user", "Keep in mind that I never work on Fridays.", ("I never work on Fridays",)),
    ("explicit", "user", "My name's Priya.", ("My name is Priya",)),
    ("explicit", "user", "From now on, call me Dr. Okafor.", ("Call me Dr. Okafor",)),
    (
        "explicit",
        "user",
        "My daughter's school is Riverside Elementary.",
        ("My daughter's school is Riverside Elementary",),
    ),
    ("explicit", "user", "Note that my team uses two-space indentation.", ("My team uses two-space indentation",)),
    ("explicit", "user", "I prefer tea over coffee, remember that.", ("I prefer tea over coffee",)),
    ("explicit", "user", "ok so my github username is lindqvist-dev", ("My github username is lindqvist-dev",)),
    (
        "explicit",
        "user",
        "Don't forget that my flight lands at 9pm on Tuesday.",
        ("My flight lands at 9pm on Tuesday",),
    ),
    ("explicit", "user", "I go by Alex.", ("I go by Alex",)),
    (
        "explicit",
        "user",
        "My preferred language for examples is Rust.",
        ("My preferred language for examples is Rust",),
    ),
    (
        "explicit",
        "user",
        "Remember that I'm allergic to peanuts. Also my office is on the 4th floor.",
        ("I'm allergic to peanuts", "My office is on the 4th floor"),
    ),
    (
        "explicit",
        "user",
        "Thanks! Remember that the staging cluster is called atlas.",
        ("The staging cluster is called atlas",),
    ),
    ("explicit", "user", "My pronouns are they/them.", ("My pronouns are they/them",)),
    (
        "explicit",
        "user",
        "I usually prefer answers in British English.",
        ("I usually prefer answers in British English",),
    ),
    ("explicit", "user", "Just so you know, my manager is Wen Li.", ("My manager is Wen Li",)),
    ("explicit", "user", "Remember: all our services run on port 8443.", ("All our services run on port 8443",)),
    ("explicit", "user", "I'd prefer window seats on long flights.", ("I'd prefer window seats on long flights",)),
    (
        "explicit",
        "user",
        "We're going with Terraform for the infra, please remember that.",
        ("We're going with Terraform for the infra",),
    ),
    ("explicit", "user", "I like my code reviews blunt.", ("I like my code reviews blunt",)),
    ("explicit", "user", "My laptop is a ThinkPad X1 running Fedora.", ("My laptop is a ThinkPad X1 running Fedora",)),
    # --- questions ---------------------------------------------------------------------
    ("question", "user", "Do you remember my deploy region?", ()),
    ("question", "user", "What is my name?", ()),
    ("question", "user", "Can you remember that I prefer metric units?", ()),
    ("question", "user", "Is my timezone set to UTC?", ()),
    ("question", "user", "my name is what again?", ()),
    ("question", "user", "How do I prefer my answers, do you know?", ()),
    ("question", "user", "Which editor is my favourite?", ()),
    # --- hypotheticals -----------------------------------------------------------------
    ("hypothetical", "user", "If I moved to Berlin, my commute would be shorter.", ()),
    ("hypothetical", "user", "Suppose my budget is 500 euros, what laptop should I buy?", ()),
    ("hypothetical", "user", "Imagine I prefer tabs. How would you format this?", ()),
    ("hypothetical", "user", "Maybe my flight is on Monday, I'm not sure.", ()),
    ("hypothetical", "user", "Let's say my name is Bob for this role-play.", ()),
    ("hypothetical", "user", "I might switch to Go next year.", ()),
    ("hypothetical", "user", "Pretend my company is a bakery and write a slogan.", ()),
    ("hypothetical", "user", "What if I prefer a darker theme later?", ()),
    # --- the assistant's words -----------------------------------------------------------
    ("assistant", "assistant", "I'll remember that your deploy region is eu-west-1.", ()),
    ("assistant", "assistant", "Remember that you should rotate your keys every 90 days.", ()),
    ("assistant", "assistant", "I prefer to answer in short paragraphs.", ()),
    ("assistant", "assistant", "My name is Claude.", ()),
    ("assistant", "assistant", "Call me anytime you need help!", ()),
    ("assistant", "assistant", "Note that your timezone is Europe/Lisbon.", ()),
    ("assistant", "assistant", "You prefer metric units, so I converted the figures.", ()),
    # --- secrets -----------------------------------------------------------------------
    ("secret", "user", "My wifi password is hunter2-Garage!", ()),
    ("secret", "user", "Remember that my API key is sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdEFGH", ()),
    ("secret", "user", "My bank PIN is 4921.", ()),
    ("secret", "user", "Remember my github token ghp_16C7e42F292c6912E7710c838347Ae178B4a", ()),
    ("secret", "user", "my db url is postgres://admin:S3cretPass@db.internal:5432/app", ()),
    ("secret", "user", "Keep in mind that the door code is 7731.", ()),
    # --- negation, retraction, jokes ------------------------------------------------------
    ("negation", "user", "My name is not Bob.", ()),
    ("negation", "user", "Remember that my locker is 12. Actually, scratch that.", ()),
    ("negation", "user", "Don't remember that I said I prefer tabs.", ()),
    ("negation", "user", "My favourite colour is purple lol", ()),
    ("negation", "user", "I prefer pineapple on pizza, just kidding.", ()),
    ("negation", "user", "My region isn't eu-west-1 anymore.", ()),
    ("negation", "user", "Never mind what I said about my birthday.", ()),
    ("negation", "user", "Call me crazy, but I think this will work.", ()),
    # --- chatter and figures of speech -------------------------------------------------------
    ("chatter", "user", "My question is about list comprehensions.", ()),
    ("chatter", "user", "My guess is the bug is in the parser.", ()),
    ("chatter", "user", "Call me back when the build finishes.", ()),
    ("chatter", "user", "Remember to run the tests before merging.", ()),
    ("chatter", "user", "Thanks, that works!", ()),
    ("chatter", "user", '"I prefer cats" is what my sister always says.', ()),
    ("chatter", "user", "My point is that the cache is stale.", ()),
    ("chatter", "user", "Can you write a haiku about autumn?", ()),
    # --- held out: written after the harness's rules were last changed, never tuned against --
    ("explicit", "user", "Remember that my son's name is Tomás.", ("My son's name is Tomás",)),
    ("explicit", "user", "I love hiking. My home airport is OPO.", ("My home airport is OPO",)),
    ("explicit", "user", "Note that I only use Linux at work.", ("I only use Linux at work",)),
    (
        "explicit",
        "user",
        "I prefer being addressed formally in emails.",
        ("I prefer being addressed formally in emails",),
    ),
    ("explicit", "user", "hi! please call me Jo", ("Call me Jo",)),
    ("explicit", "user", "We decided to ship on Thursdays, keep that in mind.", ("We decided to ship on Thursdays",)),
    ("question", "user", "Would I prefer Python or Go for this?", ()),
    ("hypothetical", "user", "If my manager asks, my answer is no.", ()),
    ("assistant", "assistant", "Sure! I prefer to keep things simple: my suggestion is to use SQLite.", ()),
    ("secret", "user", "My AWS secret access key is wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ()),
    ("negation", "user", "My dog is not a poodle, he's a terrier.", ()),
    ("chatter", "user", "My bad, I meant the other file.", ()),
]
