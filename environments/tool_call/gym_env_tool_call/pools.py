"""Word pools and phrasing helpers for the `tool_call` task templates.

The templates ask in natural forms ("March 4, 2025", "3:30 pm", "two") while the expected calls hold the
canonical forms the tool schemas ask for ("2025-03-04", "15:30", 2): converting one into the other is
part of what the environment tests. Every helper draws from the generator's seeded `Random`, so the
dataset is a pure function of the seed.
"""

from __future__ import annotations

from datetime import date, timedelta
from random import Random

__all__ = [
    "AIRPORTS",
    "ARTISTS",
    "CITIES",
    "DIRECTORIES",
    "EMAIL_TOPICS",
    "EVENT_TITLES",
    "FILES",
    "LANDMARKS",
    "MESSAGES",
    "PAYEES",
    "PEOPLE",
    "PLACE_KINDS",
    "PRODUCTS",
    "REMINDERS",
    "ROOMS",
    "SEARCH_TERMS",
    "SONGS",
    "Person",
    "polite",
    "random_date",
    "random_time",
    "say_date",
    "say_duration",
    "say_number",
    "say_time",
]


class Person:
    """A contact with a stable address derived from the name."""

    __slots__ = ("email", "name")

    def __init__(self, first: str, last: str) -> None:
        self.name = f"{first} {last}"
        self.email = f"{first.lower()}.{last.lower()}@example.com"

    def __repr__(self) -> str:
        return f"Person({self.name!r})"


PEOPLE = [
    Person(first, last)
    for first, last in [
        ("Priya", "Shah"), ("Marcus", "Lee"), ("Elena", "Rossi"), ("Tom", "Becker"), ("Aisha", "Khan"),
        ("Diego", "Alvarez"), ("Hannah", "Schmidt"), ("Kenji", "Tanaka"), ("Grace", "Okafor"),
        ("Liam", "Murphy"), ("Sofia", "Novak"), ("Noah", "Fischer"), ("Maya", "Cohen"), ("Omar", "Haddad"),
        ("Chloe", "Martin"), ("Ivan", "Petrov"), ("Zara", "Ahmed"), ("Ben", "Walsh"), ("Lucia", "Ferreira"),
        ("Sam", "Nguyen"),
    ]
]  # fmt: skip

CITIES = [
    "Paris", "Tokyo", "Nairobi", "Toronto", "Lisbon", "Seoul", "Melbourne", "Buenos Aires", "Oslo", "Cairo",
    "Mumbai", "Mexico City", "Reykjavik", "Vancouver", "Istanbul", "Singapore", "Dublin", "Cape Town",
]  # fmt: skip

AIRPORTS = [
    ("Boston", "BOS"), ("London", "LHR"), ("San Francisco", "SFO"), ("Chicago", "ORD"), ("Madrid", "MAD"),
    ("Denver", "DEN"), ("Amsterdam", "AMS"), ("Atlanta", "ATL"), ("Rome", "FCO"), ("Seattle", "SEA"),
    ("Zurich", "ZRH"), ("Miami", "MIA"),
]  # fmt: skip

EVENT_TITLES = [
    "Quarterly planning", "Design review", "Budget sync", "Team lunch", "Interview debrief", "Sprint retro",
    "Vendor call", "Roadmap workshop", "Onboarding session", "Customer demo", "Hiring committee",
    "Board prep",
]  # fmt: skip

# (subject, what the body should do as a verb phrase, keywords the body must contain)
EMAIL_TOPICS = [
    ("Invoice 2291", "let them know the invoice has been paid", ["invoice", "paid"]),
    ("Friday offsite", "tell them the offsite starts at 10am", ["offsite", "10"]),
    ("Draft contract", "ask for comments on the draft contract by Monday", ["contract", "monday"]),
    ("Server maintenance", "warn them the servers are down on Sunday", ["servers", "sunday"]),
    ("Lunch", "invite them to lunch on Thursday", ["lunch", "thursday"]),
    ("Slides", "say the slides are ready for review", ["slides", "review"]),
    ("Parking", "tell them the parking garage is closed next week", ["parking", "closed"]),
    ("Welcome aboard", "welcome them to the team", ["welcome", "team"]),
]

SEARCH_TERMS = ["flight confirmation", "quarterly report", "invoice", "password reset", "interview schedule",
                "conference registration", "lease renewal", "shipping update"]  # fmt: skip

DIRECTORIES = ["/home/me/documents", "/home/me/downloads", "/home/me/projects/atlas", "/srv/shared/reports",
               "/home/me/photos/2024", "/home/me/desktop"]  # fmt: skip
FILES = ["report.pdf", "notes.txt", "budget.xlsx", "draft_v2.docx", "todo.md", "invoice_0412.pdf", "setup.sh",
         "minutes.txt", "logo.png", "data.csv"]  # fmt: skip

# (what the user says, the words the reminder text must contain)
REMINDERS = [
    ("call the dentist", ["dentist"]), ("water the plants", ["plants"]), ("renew my passport", ["passport"]),
    ("pick up the dry cleaning", ["dry cleaning"]), ("pay the rent", ["rent"]),
    ("book the car service", ["car"]),
    ("send Mum a birthday card", ["birthday"]), ("back up the laptop", ["back up", "laptop"]),
    ("take the recycling out", ["recycling"]), ("submit the timesheet", ["timesheet"]),
]  # fmt: skip

MESSAGES = ["Running 10 minutes late", "Can you call me back?", "Dinner at 7 works for me",
            "I left the keys under the mat", "Happy birthday!", "The package arrived", "On my way",
            "Meeting moved to 3pm"]  # fmt: skip

LANDMARKS = ["Central Station", "the Riverside Mall", "221 Baker Street", "the City Library", "Union Square",
             "the airport", "Harbor Bridge", "Maple Avenue 12"]  # fmt: skip

# (what the user asks for, words the search query must contain)
PLACE_KINDS = [("coffee shops", ["coffee"]), ("a pharmacy", ["pharmacy"]), ("gas stations", ["gas"]),
               ("vegan restaurants", ["vegan"]), ("an ATM", ["atm"]), ("parking garages", ["parking"]),
               ("a hardware store", ["hardware"]), ("bike repair shops", ["bike"])]  # fmt: skip

PRODUCTS = [("wireless headphones", ["headphones"]), ("a standing desk", ["standing desk"]),
            ("running shoes", ["running shoes"]), ("a coffee grinder", ["grinder"]),
            ("an e-reader", ["e-reader"]), ("a yoga mat", ["yoga mat"]), ("a backpack", ["backpack"]),
            ("a mechanical keyboard", ["keyboard"])]  # fmt: skip

ARTISTS = ["Nina Simone", "Daft Punk", "Miles Davis", "Radiohead", "Fleetwood Mac", "Bach", "Aretha Franklin",
           "Tame Impala", "Fela Kuti", "Björk"]  # fmt: skip
SONGS = ["Clair de Lune", "Blue in Green", "Dreams", "Teardrop", "Hoppípolla", "Windowlicker",
         "Svefn-g-englar", "Midnight City", "Roygbiv", "Holocene", "Naima", "Heroes"]  # fmt: skip

ROOMS = ["kitchen", "living room", "bedroom", "office", "hallway", "bathroom"]
PAYEES = ["City Power", "Metro Water", "FiberNet", "Northside Gas", "Apex Mobile"]

_NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def random_date(rng: Random) -> date:
    """A day of 2025."""
    return date(2025, 1, 1) + timedelta(days=rng.randrange(365))


def say_date(rng: Random, day: date) -> str:
    """The date as a person might write it; every form names the year, so the ISO date is determined."""
    month = day.strftime("%B")
    forms = [
        f"{month} {day.day}, {day.year}",
        f"{day.day} {month} {day.year}",
        day.isoformat(),
        f"{day.strftime('%A')}, {month} {day.day}, {day.year}",
        f"{day.strftime('%b')} {day.day} {day.year}",
    ]
    return rng.choice(forms)


def random_time(rng: Random, first_hour: int = 7, last_hour: int = 20, step: int = 15) -> tuple[int, int]:
    """An (hour, minute) on a `step`-minute grid between the two hours."""
    return rng.randint(first_hour, last_hour), rng.randrange(0, 60, step)


def say_time(rng: Random, hour: int, minute: int) -> str:
    """The time as a person might write it: 24-hour, or 12-hour with am/pm."""
    twelve = hour % 12 or 12
    suffixes = ["am", "AM", " am", " a.m."] if hour < 12 else ["pm", "PM", " pm", " p.m."]
    suffix = rng.choice(suffixes)
    forms = [f"{hour:02d}:{minute:02d}", f"{twelve}:{minute:02d}{suffix}"]
    if minute == 0:
        forms.append(f"{twelve}{suffix}")
    return rng.choice(forms)


def say_number(rng: Random, number: int) -> str:
    """Small numbers sometimes as words."""
    if number < len(_NUMBER_WORDS) and rng.random() < 0.5:
        return _NUMBER_WORDS[number]
    return str(number)


def say_duration(rng: Random, minutes: int) -> str:
    """A length of time in words, always convertible to exact minutes."""
    forms = [f"{minutes} minutes", f"{minutes} min"]
    if minutes == 60:
        forms += ["an hour", "1 hour"]
    elif minutes == 90:
        forms += ["an hour and a half", "1.5 hours"]
    elif minutes % 60 == 0:
        forms += [f"{minutes // 60} hours"]
    return rng.choice(forms)


def polite(rng: Random, text: str) -> str:
    """Vary the register of a request without changing what it asks for."""
    return text + rng.choice(["", "", " Thanks!", " Thank you.", " Cheers."])
