"""Task templates for tools that reach the outside world: weather, maps, shopping, music, smart home,
banking and travel.

As in `intents_personal.py`, the request names every value in natural words and the expected call
holds the canonical form; a value the request leaves unsaid is `optional`, with the tool default as
the only acceptable value when the model does fill it in.
"""

from __future__ import annotations

from datetime import timedelta
from random import Random

from gym_env_tool_call.draft import Draft, Intent, call
from gym_env_tool_call.pools import (
    AIRPORTS,
    ARTISTS,
    CITIES,
    LANDMARKS,
    PAYEES,
    PLACE_KINDS,
    PRODUCTS,
    ROOMS,
    SONGS,
    polite,
    random_date,
    say_date,
    say_number,
)

__all__ = ["WORLD_INTENTS"]

_MODES = {
    "driving": ["by car", "driving"],
    "walking": ["on foot", "walking"],
    "transit": ["by public transport", "by bus or train"],
    "cycling": ["by bike", "cycling"],
}
_CURRENCY_SIGNS = {"USD": "$", "EUR": "€", "GBP": "£"}


def _landmark_words(place: str) -> list[str]:
    """The words a place argument must contain: the landmark without a leading article."""
    return [place.removeprefix("the ")]


def _units(rng: Random) -> tuple[str | None, str]:
    """A unit the request names (or None) and how it names it."""
    units = rng.choice([None, None, "celsius", "fahrenheit"])
    said = {None: "", "celsius": " in Celsius", "fahrenheit": " in Fahrenheit"}[units]
    return units, said


def weather_now(rng: Random) -> Draft:
    city = rng.choice(CITIES)
    units, said = _units(rng)
    prompt = rng.choice(
        [
            f"What's the weather like in {city} right now{said}?",
            f"Current conditions in {city}{said}, please.",
            f"How warm is it in {city} at the moment{said}?",
        ]
    )
    if units is None:
        expected = call("get_current_weather", {"city": city}, optional={"units": "celsius"})
    else:
        expected = call("get_current_weather", {"city": city, "units": units})
    return Draft("weather", prompt, (expected,))


def weather_forecast(rng: Random) -> Draft:
    city, days = rng.choice(CITIES), rng.randint(2, 10)
    units, said = _units(rng)
    count = say_number(rng, days)
    prompt = rng.choice(
        [
            f"What's the forecast for {city} for the next {count} days{said}?",
            f"Give me a {days}-day forecast for {city}{said}.",
            f"Will it rain in {city} over the next {count} days?",
        ]
    )
    arguments: dict[str, object] = {"city": city, "days": days}
    if units is None or said not in prompt:  # the rain question never names a unit
        expected = call("get_forecast", arguments, optional={"units": "celsius"})
    else:
        expected = call("get_forecast", {**arguments, "units": units})
    return Draft("weather", prompt, (expected,))


def weather_compare(rng: Random) -> Draft:
    first, second = rng.sample(CITIES, 2)
    prompt = rng.choice(
        [
            f"Compare the current weather in {first} and {second}.",
            f"Is it warmer in {first} or {second} right now?",
        ]
    )
    calls = tuple(
        call("get_current_weather", {"city": c}, optional={"units": "celsius"}) for c in (first, second)
    )
    return Draft("weather", prompt, calls)


def directions(rng: Random) -> Draft:
    origin, destination = rng.sample(LANDMARKS, 2)
    mode = rng.choice([None, *_MODES])
    how = "" if mode is None else " " + rng.choice(_MODES[mode])
    prompt = rng.choice(
        [
            f"How do I get from {origin} to {destination}{how}?",
            f"Directions to {destination} from {origin}{how}, please.",
            f"Route me from {origin} to {destination}{how}.",
        ]
    )
    contains = {"origin": _landmark_words(origin), "destination": _landmark_words(destination)}
    if mode is None:
        expected = call("get_directions", {}, optional={"mode": "driving"}, contains=contains)
    else:
        expected = call("get_directions", {"mode": mode}, contains=contains)
    return Draft("maps", prompt, (expected,))


def places(rng: Random) -> Draft:
    (kind, keywords), near = rng.choice(PLACE_KINDS), rng.choice(LANDMARKS)
    prompt = rng.choice(
        [f"Find {kind} near {near}.", f"Are there {kind} close to {near}?", f"I need {kind} around {near}."]
    )
    expected = call("search_places", {}, contains={"query": keywords, "near": _landmark_words(near)})
    return Draft("maps", polite(rng, prompt), (expected,))


def product_search(rng: Random) -> Draft:
    product, keywords = rng.choice(PRODUCTS)
    if rng.random() < 0.6:
        price = rng.choice([25, 40, 50, 80, 100, 150, 200, 300])
        prompt = rng.choice(
            [f"Look for {product} under ${price}.", f"Find me {product} for at most {price} dollars."]
        )
        expected = call("search_products", {"max_price": price}, contains={"query": keywords})
    else:
        prompt = rng.choice([f"Search the shop for {product}.", f"Do you sell {product}?"])
        expected = call("search_products", {}, contains={"query": keywords})
    return Draft("shopping", polite(rng, prompt), (expected,))


def add_to_cart(rng: Random) -> Draft:
    sku, quantity = f"SKU-{rng.randrange(1000, 9999)}", rng.choice([1, 1, 2, 3, 4, 6, 10])
    if quantity == 1:
        prompt = rng.choice([f"Add {sku} to my cart.", f"Put one {sku} in the basket."])
        expected = call("add_to_cart", {"product_id": sku}, optional={"quantity": 1})
    else:
        count = say_number(rng, quantity)
        prompt = rng.choice(
            [f"Add {count} of {sku} to my cart.", f"I'd like {count} units of product {sku} in my cart."]
        )
        expected = call("add_to_cart", {"product_id": sku, "quantity": quantity})
    return Draft("shopping", polite(rng, prompt), (expected,))


def track_order(rng: Random) -> Draft:
    order = f"ORD-{rng.randrange(100000, 999999)}"
    prompt = rng.choice([f"Where is my order {order}?", f"Track order {order}.", f"Has {order} shipped yet?"])
    return Draft("shopping", prompt, (call("track_order", {"order_id": order}),))


def play_music(rng: Random) -> Draft:
    artist = rng.choice(ARTISTS)
    if rng.random() < 0.4:
        prompt = rng.choice([f"Play {artist} on shuffle.", f"Shuffle some {artist}."])
        expected = call("play_music", {"query": artist, "shuffle": True})
    else:
        prompt = rng.choice([f"Play some {artist}.", f"Put on {artist}.", f"I want to listen to {artist}."])
        expected = call("play_music", {"query": artist}, optional={"shuffle": False})
    return Draft("music", polite(rng, prompt), (expected,))


def set_volume(rng: Random) -> Draft:
    level = rng.choice([10, 15, 20, 25, 30, 40, 50, 60, 70, 75, 80])
    prompt = rng.choice(
        [f"Set the volume to {level}%.", f"Turn the volume to {level} percent.", f"Volume {level}, please."]
    )
    return Draft("music", prompt, (call("set_volume", {"level": level}),))


def create_playlist(rng: Random) -> Draft:
    name = rng.choice(["Focus", "Road trip", "Sunday morning", "Workout", "Rainy day", "Dinner party"])
    songs = rng.sample(SONGS, rng.randint(2, 4))
    listed = ", ".join(songs[:-1]) + " and " + songs[-1]
    prompt = rng.choice(
        [f"Make a playlist called '{name}' with {listed}.", f'New playlist "{name}": {listed}.']
    )
    expected = call("create_playlist", {"name": name, "songs": songs}, unordered=("songs",))
    return Draft("music", polite(rng, prompt), (expected,))


def thermostat(rng: Random) -> Draft:
    unit = rng.choice(["celsius", "fahrenheit"])
    degrees = rng.randint(17, 25) if unit == "celsius" else rng.randint(62, 78)
    said = rng.choice([f"{degrees} degrees {unit.title()}", f"{degrees}°{unit[0].upper()}"])
    prompt = rng.choice(
        [f"Set the thermostat to {said}.", f"Make it {said} in here.", f"Heat the house to {said}."]
    )
    return Draft(
        "smart_home", polite(rng, prompt), (call("set_thermostat", {"temperature": degrees, "unit": unit}),)
    )


def _lights(rng: Random, room: str) -> tuple[str, dict[str, object]]:
    roll = rng.random()
    if roll < 0.4:
        return f"turn off the {room} lights", {"room": room, "state": "off"}
    if roll < 0.7:
        return f"switch on the lights in the {room}", {"room": room, "state": "on"}
    level = rng.choice([20, 30, 40, 50, 60, 75])
    return f"dim the {room} lights to {level}%", {"room": room, "state": "on", "brightness": level}


def lights(rng: Random) -> Draft:
    what, arguments = _lights(rng, rng.choice(ROOMS))
    prompt = rng.choice([f"Please {what}.", f"Can you {what}?", what[0].upper() + what[1:] + "."])
    return Draft("smart_home", prompt, (call("set_lights", arguments),))


def goodnight(rng: Random) -> Draft:
    what, arguments = _lights(rng, rng.choice(ROOMS))
    door = rng.choice(["front", "back", "garage"])
    prompt = rng.choice(
        [f"Going to bed: {what} and lock the {door} door.", f"Please {what}, then lock the {door} door."]
    )
    calls = (call("set_lights", arguments), call("lock_door", {"door": door}))
    return Draft("smart_home", prompt, calls)


def balance(rng: Random) -> Draft:
    account = rng.choice(["checking", "savings", "credit"])
    prompt = rng.choice([f"How much is in my {account} account?", f"What's my {account} balance?"])
    return Draft("banking", prompt, (call("get_balance", {"account": account}),))


def transfer(rng: Random) -> Draft:
    source, target = rng.sample(["checking", "savings"], 2)
    amount = rng.choice([50, 120, 250, 400, 1000, 75.5, 1250.25])
    currency = rng.choice(["USD", "USD", "EUR", "GBP"])
    said = f"{_CURRENCY_SIGNS[currency]}{amount:,}" if rng.random() < 0.5 else f"{amount:,} {currency}"
    prompt = rng.choice(
        [
            f"Move {said} from {source} to {target}.",
            f"Transfer {said} from my {source} account into {target}.",
        ]
    )
    arguments: dict[str, object] = {"from_account": source, "to_account": target, "amount": amount}
    if currency == "USD":  # the tool's default, so leaving it out is as right as saying it
        expected = call("transfer_money", arguments, optional={"currency": "USD"})
    else:
        expected = call("transfer_money", {**arguments, "currency": currency})
    return Draft("banking", polite(rng, prompt), (expected,))


def pay_bill(rng: Random) -> Draft:
    payee, amount = rng.choice(PAYEES), rng.choice([35, 42.9, 60, 89.99, 120, 54.5])
    said = f"${amount:.2f}" if isinstance(amount, float) else f"${amount}"
    prompt = rng.choice([f"Pay the {payee} bill, {said}.", f"Send {payee} {said} for this month's bill."])
    return Draft("banking", polite(rng, prompt), (call("pay_bill", {"payee": payee, "amount": amount}),))


def flights(rng: Random) -> Draft:
    (origin, origin_code), (destination, target_code) = rng.sample(AIRPORTS, 2)
    day, travellers = random_date(rng), rng.choice([1, 1, 2, 3, 4])
    who = "" if travellers == 1 else f" for {say_number(rng, travellers)} people"
    when = say_date(rng, day)
    prompt = rng.choice(
        [
            f"Find flights from {origin} ({origin_code}) to {destination} ({target_code}), {when}{who}.",
            f"Any flights {origin_code} to {target_code} on {when}{who}?",
        ]
    )
    arguments: dict[str, object] = {
        "origin": origin_code,
        "destination": target_code,
        "date": day.isoformat(),
    }
    if travellers == 1:
        expected = call("search_flights", arguments, optional={"passengers": 1})
    else:
        expected = call("search_flights", {**arguments, "passengers": travellers})
    return Draft("travel", polite(rng, prompt), (expected,))


def hotel(rng: Random) -> Draft:
    city, check_in, nights = rng.choice(CITIES), random_date(rng), rng.randint(1, 6)
    check_out = check_in + timedelta(days=nights)
    guests = rng.choice([1, 2, 2, 3])
    who = "" if guests == 1 else f" for {say_number(rng, guests)} guests"
    prompt = f"Book a hotel in {city} from {say_date(rng, check_in)} to {say_date(rng, check_out)}{who}."
    arguments: dict[str, object] = {
        "city": city,
        "check_in": check_in.isoformat(),
        "check_out": check_out.isoformat(),
    }
    if guests == 1:
        expected = call("book_hotel", arguments, optional={"guests": 1})
    else:
        expected = call("book_hotel", {**arguments, "guests": guests})
    return Draft("travel", polite(rng, prompt), (expected,))


WORLD_INTENTS: tuple[Intent, ...] = (
    weather_now, weather_forecast, weather_compare, directions, places, product_search, add_to_cart,
    track_order, play_music, set_volume, create_playlist, thermostat, lights, goodnight, balance, transfer,
    pay_bill, flights, hotel,
)  # fmt: skip
