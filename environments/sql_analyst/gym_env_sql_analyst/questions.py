"""Question templates: a question in words, the gold query that answers it, and whether row order counts.

Each template draws its parameters (a city, a category, a month...) from a `Random`; `generate.py` runs
them round-robin per family. The question always says which columns the answer has and in which order,
and says "ordered by ..." exactly when the gold query's ORDER BY is part of the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from random import Random

from gym_env_sql_analyst.schemas import CATEGORIES, CITIES, DEPARTMENTS

__all__ = ["TEMPLATES", "SqlQuestion"]

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")  # fmt: skip
_AIRPORT_CODES = ("LIS", "KIX", "DEN", "NBO", "OSL", "BOG", "DUB", "HAN", "OPO", "BGO")


@dataclass(frozen=True, slots=True)
class SqlQuestion:
    prompt: str
    sql: str
    order_matters: bool = False


Template = Callable[[Random], SqlQuestion]


def _orders_in_city(rng: Random) -> SqlQuestion:
    city = rng.choice(CITIES)
    return SqlQuestion(
        f"How many orders (any status) were placed by customers who live in {city}? One row, one column: "
        "the count.",
        f"SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.city = '{city}'",
    )


def _category_revenue(rng: Random) -> SqlQuestion:
    category = rng.choice(CATEGORIES)
    return SqlQuestion(
        f"What was the revenue (quantity times unit price) from delivered orders of products in the "
        f"'{category}' category? One row, one column.",
        "SELECT SUM(i.quantity * p.price) FROM order_items i JOIN products p ON p.id = i.product_id "
        f"JOIN orders o ON o.id = i.order_id WHERE o.status = 'delivered' AND p.category = '{category}'",
    )


def _top_customers(rng: Random) -> SqlQuestion:
    count = rng.choice((3, 4, 5))
    return SqlQuestion(
        f"Which {count} customers spent the most on delivered orders (quantity times unit price)? Columns: "
        "customer name, total spent; ordered by total spent, highest first.",
        "SELECT c.name, SUM(i.quantity * p.price) AS spent FROM customers c JOIN orders o ON "
        "o.customer_id = c.id JOIN order_items i ON i.order_id = o.id JOIN products p ON p.id = "
        f"i.product_id WHERE o.status = 'delivered' GROUP BY c.id ORDER BY spent DESC LIMIT {count}",
        order_matters=True,
    )


def _never_ordered(_rng: Random) -> SqlQuestion:
    return SqlQuestion(
        "Which products have never been ordered? Columns: product name.",
        "SELECT name FROM products WHERE id NOT IN (SELECT product_id FROM order_items)",
    )


def _monthly_orders(rng: Random) -> SqlQuestion:
    month = rng.randrange(1, 13)
    return SqlQuestion(
        f"For each product category, how many units were ordered in {_MONTHS[month - 1]} 2024 (orders of any "
        "status)? Columns: category, units. Leave out categories with no units that month.",
        "SELECT p.category, SUM(i.quantity) FROM order_items i JOIN products p ON p.id = i.product_id JOIN "
        f"orders o ON o.id = i.order_id WHERE substr(o.order_date, 1, 7) = '2024-{month:02d}' GROUP BY "
        "p.category",
    )


def _cancel_rate(rng: Random) -> SqlQuestion:
    city = rng.choice(CITIES)
    return SqlQuestion(
        f"What share of the orders placed by customers in {city} were cancelled? One row, one column: a "
        "fraction between 0 and 1.",
        "SELECT AVG(o.status = 'cancelled') FROM orders o JOIN customers c ON c.id = o.customer_id "
        f"WHERE c.city = '{city}'",
    )


def _average_salary(_rng: Random) -> SqlQuestion:
    return SqlQuestion(
        "What is the average salary in each department? Columns: department name, average salary.",
        "SELECT d.name, AVG(e.salary) FROM employees e JOIN departments d ON d.id = e.department_id "
        "GROUP BY d.id",
    )


def _hired_in(rng: Random) -> SqlQuestion:
    year, department = rng.randrange(2016, 2024), rng.choice(DEPARTMENTS)
    return SqlQuestion(
        f"Who joined the {department} department in {year}? Columns: employee name, hire date; ordered by "
        "hire date, earliest first.",
        "SELECT e.name, e.hire_date FROM employees e JOIN departments d ON d.id = e.department_id WHERE "
        f"d.name = '{department}' AND substr(e.hire_date, 1, 4) = '{year}' ORDER BY e.hire_date",
        order_matters=True,
    )


def _above_manager(rng: Random) -> SqlQuestion:
    department = rng.choice(DEPARTMENTS)
    return SqlQuestion(
        f"Which employees of the {department} department earn at least 90% of their manager's salary? "
        "Columns: employee name, salary.",
        "SELECT e.name, e.salary FROM employees e JOIN employees m ON m.id = e.manager_id JOIN departments d "
        f"ON d.id = e.department_id WHERE d.name = '{department}' AND e.salary >= 0.9 * m.salary",
    )


def _headcount_by_city(_rng: Random) -> SqlQuestion:
    return SqlQuestion(
        "How many employees work in each city (the city of their department)? Columns: city, headcount; "
        "ordered by headcount, largest first, then city name A to Z.",
        "SELECT d.city, COUNT(*) AS n FROM employees e JOIN departments d ON d.id = e.department_id "
        "GROUP BY d.city ORDER BY n DESC, d.city",
        order_matters=True,
    )


def _cheapest_route(rng: Random) -> SqlQuestion:
    origin, destination = rng.sample(_AIRPORT_CODES, 2)
    return SqlQuestion(
        f"What is the lowest price of a flight from {origin} to {destination}? One row, one column (NULL "
        "when there is no such flight).",
        f"SELECT MIN(price) FROM flights WHERE origin = '{origin}' AND destination = '{destination}'",
    )


def _country_departures(rng: Random) -> SqlQuestion:
    country = rng.choice(("Portugal", "Norway", "Japan", "USA", "Kenya", "Colombia", "Ireland", "Vietnam"))
    return SqlQuestion(
        f"How many flights depart from airports in {country}? One row, one column.",
        f"SELECT COUNT(*) FROM flights f JOIN airports a ON a.code = f.origin WHERE a.country = '{country}'",
    )


def _busiest_destinations(rng: Random) -> SqlQuestion:
    seat, count = rng.choice(("economy", "business", "first")), rng.choice((3, 5))
    return SqlQuestion(
        f"Which {count} destination cities have the most {seat}-class bookings? Columns: city, bookings; "
        "ordered by bookings, most first, then city A to Z.",
        "SELECT a.city, COUNT(*) AS n FROM bookings b JOIN flights f ON f.id = b.flight_id JOIN airports a "
        f"ON a.code = f.destination WHERE b.seat_class = '{seat}' GROUP BY a.city ORDER BY n DESC, a.city "
        f"LIMIT {count}",
        order_matters=True,
    )


def _frequent_flyers(rng: Random) -> SqlQuestion:
    trips = rng.choice((8, 9, 10))
    return SqlQuestion(
        f"Which passengers have at least {trips} bookings? Columns: passenger, number of bookings.",
        f"SELECT passenger, COUNT(*) FROM bookings GROUP BY passenger HAVING COUNT(*) >= {trips}",
    )


def _long_haul_average(rng: Random) -> SqlQuestion:
    minutes = rng.choice((300, 420, 600))
    return SqlQuestion(
        f"What is the average price of flights that last longer than {minutes} minutes? One row, one column.",
        f"SELECT AVG(price) FROM flights WHERE duration_min > {minutes}",
    )


TEMPLATES: dict[str, tuple[Template, ...]] = {
    "shop": (
        _orders_in_city,
        _category_revenue,
        _top_customers,
        _never_ordered,
        _monthly_orders,
        _cancel_rate,
    ),
    "hr": (_average_salary, _hired_in, _above_manager, _headcount_by_city),
    "flights": (
        _cheapest_route,
        _country_departures,
        _busiest_destinations,
        _frequent_flyers,
        _long_haul_average,
    ),
}
