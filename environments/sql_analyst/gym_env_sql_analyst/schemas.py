"""The databases: one generated SQLite database per task family, as a SQL script that builds it.

`database_script(family)` is a pure function of the family's name (its rows are drawn from a seeded
`Random`), so the host (which runs the gold queries) and the sandbox (which runs the model's) build the
same database from the same text. Three families, small enough to build in milliseconds, large enough
that a question cannot be answered by reading the tables row by row:

| family | tables |
|---|---|
| `shop` | customers, products, orders, order_items |
| `hr` | departments, employees (with managers and salaries) |
| `flights` | airports, flights, bookings |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, timedelta
from functools import cache
from random import Random

__all__ = ["CATEGORIES", "CITIES", "DEPARTMENTS", "FAMILIES", "database_script", "schema_text"]

CITIES = ("Lisbon", "Osaka", "Denver", "Nairobi", "Oslo", "Bogota", "Dublin", "Hanoi")
CATEGORIES = ("books", "garden", "kitchen", "toys", "sports", "music")
DEPARTMENTS = ("Engineering", "Sales", "Finance", "Support", "Marketing", "Legal")
_FIRST = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kira", "Liam",
          "Maya", "Nikhil", "Olga", "Pablo", "Quinn", "Rosa", "Samir", "Tara")  # fmt: skip
_LAST = ("Abbott", "Brennan", "Castillo", "Dubois", "Eriksen", "Fischer", "Gupta", "Hayes", "Ibarra",
         "Jensen", "Kowalski", "Moreau", "Nakamura", "Okafor", "Petrov", "Rossi")  # fmt: skip
_ADJECTIVES = ("Classic", "Deluxe", "Compact", "Eco", "Pro", "Mini", "Smart", "Rustic")
_NOUNS = {
    "books": ("Atlas", "Cookbook", "Novel", "Journal"),
    "garden": ("Trowel", "Planter", "Hose", "Rake"),
    "kitchen": ("Kettle", "Skillet", "Grater", "Blender"),
    "toys": ("Puzzle", "Kite", "Robot", "Yo-yo"),
    "sports": ("Racket", "Helmet", "Ball", "Mat"),
    "music": ("Ukulele", "Metronome", "Harmonica", "Drum"),
}
_TITLES = ("Engineer", "Analyst", "Manager", "Specialist", "Associate")
_AIRPORTS = (("LIS", "Lisbon", "Portugal"), ("KIX", "Osaka", "Japan"), ("DEN", "Denver", "USA"),
             ("NBO", "Nairobi", "Kenya"), ("OSL", "Oslo", "Norway"), ("BOG", "Bogota", "Colombia"),
             ("DUB", "Dublin", "Ireland"), ("HAN", "Hanoi", "Vietnam"), ("OPO", "Porto", "Portugal"),
             ("BGO", "Bergen", "Norway"))  # fmt: skip
_START = date(2024, 1, 1)


def _names(rng: Random, count: int) -> list[str]:
    pairs = rng.sample([f"{first} {last}" for first in _FIRST for last in _LAST], count)
    return sorted(pairs, key=lambda _: rng.random())


def _quote(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _insert(table: str, rows: Sequence[Sequence[object]]) -> str:
    values = ",\n".join("(" + ", ".join(_quote(value) for value in row) + ")" for row in rows)
    return f"INSERT INTO {table} VALUES\n{values};"


def _shop(rng: Random) -> list[str]:
    customers = [
        (number, name, rng.choice(CITIES), (_START - timedelta(days=rng.randrange(900))).isoformat())
        for number, name in enumerate(_names(rng, 120), start=1)
    ]
    products: list[tuple[int, str, str, float]] = []
    seen: set[str] = set()
    while len(products) < 60:
        category = rng.choice(CATEGORIES)
        name = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS[category])}"
        if name not in seen:
            seen.add(name)
            products.append((len(products) + 1, name, category, round(rng.uniform(3, 250), 2)))
    orders, items = [], []
    for number in range(1, 601):
        day = _START + timedelta(days=rng.randrange(366))
        status = rng.choices(("delivered", "shipped", "cancelled"), (7, 2, 1))[0]
        orders.append((number, rng.randrange(1, 101), day.isoformat(), status))  # customers 101+ never order
        for product in rng.sample(range(1, 58), rng.randrange(1, 4)):  # products 58+ are never ordered
            items.append((number, product, rng.randrange(1, 5)))
    return [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, "
        "signup_date TEXT NOT NULL);",
        "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, "
        "price REAL NOT NULL);",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), "
        "order_date TEXT NOT NULL, status TEXT NOT NULL);",
        "CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id), product_id INTEGER NOT "
        "NULL REFERENCES products(id), quantity INTEGER NOT NULL);",
        _insert("customers", customers),
        _insert("products", products),
        _insert("orders", orders),
        _insert("order_items", items),
    ]


def _hr(rng: Random) -> list[str]:
    departments = [(number, name, rng.choice(CITIES)) for number, name in enumerate(DEPARTMENTS, start=1)]
    employees: list[tuple[object, ...]] = []
    for number, name in enumerate(_names(rng, 150), start=1):
        department = (number - 1) % len(DEPARTMENTS) + 1 if number <= 6 else rng.randrange(1, 7)
        manager = None if number <= 6 else department  # the first six head their departments
        title = "Head" if number <= 6 else rng.choice(_TITLES)
        hired = (_START - timedelta(days=rng.randrange(3650))).isoformat()
        salary = rng.randrange(40, 180) * 1000 if number > 6 else rng.randrange(120, 200) * 1000
        employees.append((number, name, department, title, hired, salary, manager))
    return [
        "CREATE TABLE departments (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);",
        "CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, department_id INTEGER NOT NULL "
        "REFERENCES departments(id), title TEXT NOT NULL, hire_date TEXT NOT NULL, salary INTEGER NOT NULL, "
        "manager_id INTEGER REFERENCES employees(id));",
        _insert("departments", departments),
        _insert("employees", employees),
    ]


def _flights(rng: Random) -> list[str]:
    flights = []
    codes = [airport[0] for airport in _AIRPORTS]
    for number in range(1, 301):
        origin, destination = rng.sample(codes, 2)
        day = _START + timedelta(days=rng.randrange(180))
        departure = f"{day.isoformat()} {rng.randrange(5, 23):02d}:{rng.choice((0, 15, 30, 45)):02d}"
        flights.append(
            (number, origin, destination, departure, rng.randrange(60, 900), rng.randrange(40, 900))
        )
    names = _names(rng, 200)
    bookings = [
        (
            number,
            rng.randrange(1, 301),
            rng.choice(names),
            rng.choices(("economy", "business", "first"), (8, 3, 1))[0],
        )
        for number in range(1, 1201)
    ]
    return [
        "CREATE TABLE airports (code TEXT PRIMARY KEY, city TEXT NOT NULL, country TEXT NOT NULL);",
        "CREATE TABLE flights (id INTEGER PRIMARY KEY, origin TEXT NOT NULL REFERENCES airports(code), "
        "destination TEXT NOT NULL REFERENCES airports(code), departure TEXT NOT NULL, duration_min INTEGER "
        "NOT NULL, price INTEGER NOT NULL);",
        "CREATE TABLE bookings (id INTEGER PRIMARY KEY, flight_id INTEGER NOT NULL REFERENCES flights(id), "
        "passenger TEXT NOT NULL, seat_class TEXT NOT NULL);",
        _insert("airports", list(_AIRPORTS)),
        _insert("flights", flights),
        _insert("bookings", bookings),
    ]


FAMILIES: dict[str, Callable[[Random], list[str]]] = {"shop": _shop, "hr": _hr, "flights": _flights}


@cache
def database_script(family: str) -> str:
    """The SQL script that builds the family's database (cached: it is a pure function of `family`).

    Raises:
        KeyError: an unknown family.
    """
    return "\n".join(FAMILIES[family](Random(f"sql-analyst\x00{family}"))) + "\n"


@cache
def schema_text(family: str) -> str:
    """The family's CREATE TABLE statements: what the model is shown at the start."""
    return "\n".join(line for line in FAMILIES[family](Random(0)) if line.startswith("CREATE TABLE"))
