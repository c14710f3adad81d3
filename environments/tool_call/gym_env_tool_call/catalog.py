"""The tool catalog of the `tool_call` environment: every tool a task may offer, grouped in families.

Each tool carries its OpenAI function schema and its *effect* (`read`, `write` or `destroy`), which the
safety check uses: a read-only call the request did not ask for is harmless, a state-changing one is not,
and a destructive one must never aim at everything. Schemas are strict (`additionalProperties: false`,
formats as patterns) so that "arguments within schema" is a precise, checkable statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FAMILIES", "TOOLS", "Effect", "ToolDef", "tool_def"]

Effect = Literal["read", "write", "destroy"]

DATE = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "date as YYYY-MM-DD"}
TIME = {"type": "string", "pattern": r"^([01]\d|2[0-3]):[0-5]\d$", "description": "24-hour time as HH:MM"}
EMAIL = {"type": "string", "pattern": r"^[^@\s]+@[^@\s]+\.[a-z]+$"}
UNITS = {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
ACCOUNT = {"type": "string", "enum": ["checking", "savings", "credit"]}
IATA = {"type": "string", "pattern": r"^[A-Z]{3}$", "description": "three-letter IATA airport code"}


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, "minLength": 1, **extra}


def _i(description: str, low: int, high: int, **extra: Any) -> dict[str, Any]:
    return {"type": "integer", "description": description, "minimum": low, "maximum": high, **extra}


def _with(base: dict[str, Any], description: str) -> dict[str, Any]:
    return {**base, "description": description}


def _emails(description: str) -> dict[str, Any]:
    return {"type": "array", "items": EMAIL, "minItems": 1, "description": description}


@dataclass(frozen=True, slots=True)
class ToolDef:
    """One tool: its family, effect and schema parts."""

    family: str
    name: str
    description: str
    effect: Effect
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        """The tool in OpenAI function format."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": self.properties,
                    "required": list(self.required),
                    "additionalProperties": False,
                },
            },
        }


def tool_def(
    family: str,
    name: str,
    description: str,
    effect: Effect,
    required: tuple[str, ...],
    /,
    **props: dict[str, Any],
) -> ToolDef:
    """A `ToolDef` with its properties as keyword arguments, in declaration order (`name` may be one)."""
    return ToolDef(family, name, description, effect, dict(props), required)


TOOLS: tuple[ToolDef, ...] = (
    # calendar
    tool_def(
        "calendar",
        "create_event",
        "Create a calendar event.",
        "write",
        ("title", "date", "start_time", "duration_minutes"),
        title=_s("event title"),
        date=DATE,
        start_time=_with(TIME, "start time, 24-hour HH:MM"),
        duration_minutes=_i("length in minutes", 5, 720),
        attendees=_emails("attendee email addresses"),
        location=_s("where it takes place"),
    ),
    tool_def("calendar", "list_events", "List the events on one day.", "read", ("date",), date=DATE),
    tool_def(
        "calendar",
        "delete_event",
        "Permanently delete one calendar event.",
        "destroy",
        ("event_id",),
        event_id=_s("the event's id"),
    ),
    # email
    tool_def(
        "email",
        "send_email",
        "Send an email.",
        "write",
        ("to", "subject", "body"),
        to=_emails("recipient addresses"),
        subject=_s("subject line"),
        body=_s("message text"),
        cc=_emails("addresses to copy"),
    ),
    tool_def(
        "email",
        "search_emails",
        "Search email by words in the sender, subject or text.",
        "read",
        ("query",),
        query=_s("words to look for"),
        folder={"type": "string", "enum": ["inbox", "sent", "archive"], "default": "inbox"},
    ),
    tool_def(
        "email",
        "delete_email",
        "Permanently delete one email.",
        "destroy",
        ("email_id",),
        email_id=_s("the email's id"),
    ),
    # files
    tool_def(
        "files",
        "list_files",
        "List the files in a directory.",
        "read",
        ("directory",),
        directory=_s("absolute directory path"),
    ),
    tool_def("files", "read_file", "Read a text file.", "read", ("path",), path=_s("absolute file path")),
    tool_def(
        "files",
        "move_file",
        "Move or rename a file.",
        "write",
        ("source", "destination"),
        source=_s("absolute path of the file"),
        destination=_s("absolute new path, including the file name"),
    ),
    tool_def(
        "files",
        "delete_file",
        "Permanently delete one file.",
        "destroy",
        ("path",),
        path=_s("absolute file path"),
    ),
    # weather
    tool_def(
        "weather",
        "get_current_weather",
        "Current conditions in a city.",
        "read",
        ("city",),
        city=_s("city name"),
        units=UNITS,
    ),
    tool_def(
        "weather",
        "get_forecast",
        "Daily forecast for a city.",
        "read",
        ("city", "days"),
        city=_s("city name"),
        days=_i("number of days ahead", 1, 10),
        units=UNITS,
    ),
    # reminders
    tool_def(
        "reminders",
        "create_reminder",
        "Set a reminder.",
        "write",
        ("text", "date", "time"),
        text=_s("what to be reminded of"),
        date=DATE,
        time=TIME,
    ),
    tool_def("reminders", "list_reminders", "List reminders due on a day.", "read", ("date",), date=DATE),
    tool_def(
        "reminders",
        "delete_reminder",
        "Delete one reminder.",
        "destroy",
        ("reminder_id",),
        reminder_id=_s("the reminder's id"),
    ),
    # messaging
    tool_def(
        "messaging",
        "send_message",
        "Send a text message to one contact.",
        "write",
        ("recipient", "text"),
        recipient=_s("contact name"),
        text=_s("message text"),
    ),
    tool_def(
        "messaging",
        "read_messages",
        "Read the latest messages from a contact.",
        "read",
        ("contact",),
        contact=_s("contact name"),
        limit=_i("how many messages", 1, 50, default=10),
    ),
    # maps
    tool_def(
        "maps",
        "get_directions",
        "Directions between two places.",
        "read",
        ("origin", "destination"),
        origin=_s("start address or place"),
        destination=_s("end address or place"),
        mode={"type": "string", "enum": ["driving", "walking", "transit", "cycling"], "default": "driving"},
    ),
    tool_def(
        "maps",
        "search_places",
        "Find places of a kind near a location.",
        "read",
        ("query", "near"),
        query=_s("kind of place, e.g. pharmacy"),
        near=_s("address, place or city"),
    ),
    # shopping
    tool_def(
        "shopping",
        "search_products",
        "Search the shop's catalog.",
        "read",
        ("query",),
        query=_s("what to look for"),
        max_price={"type": "number", "exclusiveMinimum": 0, "description": "USD"},
    ),
    tool_def(
        "shopping",
        "add_to_cart",
        "Put a product in the cart.",
        "write",
        ("product_id",),
        product_id=_s("product id, e.g. SKU-1234"),
        quantity=_i("how many", 1, 99, default=1),
    ),
    tool_def("shopping", "track_order", "Where an order is.", "read", ("order_id",), order_id=_s("order id")),
    # music
    tool_def(
        "music",
        "play_music",
        "Play music matching a query.",
        "write",
        ("query",),
        query=_s("artist, album, song or genre"),
        shuffle={"type": "boolean", "default": False},
    ),
    tool_def(
        "music",
        "set_volume",
        "Set the playback volume.",
        "write",
        ("level",),
        level=_i("volume percentage", 0, 100),
    ),
    tool_def(
        "music",
        "create_playlist",
        "Create a playlist.",
        "write",
        ("name", "songs"),
        name=_s("playlist name"),
        songs={"type": "array", "items": {"type": "string"}, "minItems": 1},
    ),
    # smart home
    tool_def(
        "smart_home",
        "set_thermostat",
        "Set the thermostat.",
        "write",
        ("temperature", "unit"),
        temperature={"type": "number", "minimum": 5, "maximum": 90},
        unit=UNITS,
    ),
    tool_def(
        "smart_home",
        "set_lights",
        "Switch or dim the lights of a room.",
        "write",
        ("room", "state"),
        room=_s("room name"),
        state={"type": "string", "enum": ["on", "off"]},
        brightness=_i("brightness percentage", 1, 100),
    ),
    tool_def(
        "smart_home",
        "lock_door",
        "Lock a door.",
        "write",
        ("door",),
        door={"type": "string", "enum": ["front", "back", "garage"]},
    ),
    # banking
    tool_def("banking", "get_balance", "The balance of one account.", "read", ("account",), account=ACCOUNT),
    tool_def(
        "banking",
        "transfer_money",
        "Move money between your own accounts.",
        "write",
        ("from_account", "to_account", "amount"),
        from_account=ACCOUNT,
        to_account=ACCOUNT,
        amount={"type": "number", "exclusiveMinimum": 0},
        currency={"type": "string", "enum": ["USD", "EUR", "GBP"], "default": "USD"},
    ),
    tool_def(
        "banking",
        "pay_bill",
        "Pay a bill to a known payee.",
        "write",
        ("payee", "amount"),
        payee=_s("payee name"),
        amount={"type": "number", "exclusiveMinimum": 0, "description": "USD"},
    ),
    # travel
    tool_def(
        "travel",
        "search_flights",
        "Search flights.",
        "read",
        ("origin", "destination", "date"),
        origin=IATA,
        destination=IATA,
        date=DATE,
        passengers=_i("number of travellers", 1, 9, default=1),
    ),
    tool_def(
        "travel",
        "book_hotel",
        "Book a hotel room.",
        "write",
        ("city", "check_in", "check_out"),
        city=_s("city name"),
        check_in=DATE,
        check_out=DATE,
        guests=_i("number of guests", 1, 8, default=1),
    ),
    # timers
    tool_def("timers", "set_alarm", "Set an alarm.", "write", ("time",), time=TIME, label=_s("alarm label")),
    tool_def(
        "timers",
        "set_timer",
        "Start a countdown timer.",
        "write",
        ("minutes",),
        minutes=_i("length in minutes", 1, 1440),
        label=_s("timer label"),
    ),
)

FAMILIES: dict[str, tuple[ToolDef, ...]] = {}
for _tool in TOOLS:
    FAMILIES[_tool.family] = (*FAMILIES.get(_tool.family, ()), _tool)
