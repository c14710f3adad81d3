"""Task templates for personal-organisation tools: calendar, email, files, reminders, messaging, timers.

Each template names every value the call needs, in words a person would use; the expected call holds
the canonical form. Free text the model must compose (an email body, a reminder's text) is checked by
keywords, never word for word.
"""

from __future__ import annotations

from random import Random

from gym_env_tool_call.draft import Draft, Intent, call
from gym_env_tool_call.pools import (
    DIRECTORIES,
    EMAIL_TOPICS,
    EVENT_TITLES,
    FILES,
    MESSAGES,
    PEOPLE,
    REMINDERS,
    SEARCH_TERMS,
    polite,
    random_date,
    random_time,
    say_date,
    say_duration,
    say_number,
    say_time,
)

__all__ = ["PERSONAL_INTENTS"]


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _hex_id(rng: Random, prefix: str, digits: int = 6) -> str:
    return prefix + "".join(rng.choice("0123456789abcdef") for _ in range(digits))


def calendar_create(rng: Random) -> Draft:
    title, day = rng.choice(EVENT_TITLES), random_date(rng)
    hour, minute = random_time(rng, 8, 17)
    duration = rng.choice([15, 30, 45, 60, 90, 120])
    people = rng.sample(PEOPLE, rng.randint(1, 3))
    who = _and([person.email for person in people])
    when, length = f"{say_date(rng, day)} at {say_time(rng, hour, minute)}", say_duration(rng, duration)
    prompt = rng.choice(
        [
            f"Schedule '{title}' on {when} for {length} with {who}.",
            f'Put a {length} meeting called "{title}" in my calendar on {when} and invite {who}.',
            f'Book {length} for "{title}" on {when}. Attendees: {who}.',
            f"Set up {title} ({length}) on {when}; add {who}.",
        ]
    )
    expected = call(
        "create_event",
        {
            "title": title,
            "date": day.isoformat(),
            "start_time": f"{hour:02d}:{minute:02d}",
            "duration_minutes": duration,
            "attendees": [person.email for person in people],
        },
        unordered=("attendees",),
    )
    return Draft("calendar", polite(rng, prompt), (expected,))


def calendar_list(rng: Random) -> Draft:
    day = random_date(rng)
    said = say_date(rng, day)
    prompt = rng.choice(
        [
            f"What's on my calendar on {said}?",
            f"Show me my schedule for {said}.",
            f"Do I have anything booked on {said}?",
            f"List my events for {said}.",
        ]
    )
    return Draft("calendar", prompt, (call("list_events", {"date": day.isoformat()}),))


def calendar_delete(rng: Random) -> Draft:
    event_id = _hex_id(rng, "evt_")
    prompt = rng.choice(
        [
            f"Delete the calendar event with id {event_id}.",
            f"Event {event_id} was called off, remove it from my calendar.",
            f"Please get rid of calendar entry {event_id}.",
        ]
    )
    return Draft("calendar", polite(rng, prompt), (call("delete_event", {"event_id": event_id}),))


def email_send(rng: Random) -> Draft:
    person, (subject, purpose, keywords) = rng.choice(PEOPLE), rng.choice(EMAIL_TOPICS)
    copied = rng.choice([None, None, rng.choice([p for p in PEOPLE if p is not person])])
    cc = f", and cc {copied.email}" if copied else ""
    prompt = rng.choice(
        [
            f'Email {person.email} with the subject "{subject}" to {purpose}{cc}.',
            f'Write to {person.name} at {person.email}, subject "{subject}": {purpose}{cc}.',
            f'Send {person.name} ({person.email}) an email titled "{subject}" to {purpose}{cc}.',
        ]
    )
    arguments: dict[str, object] = {"to": [person.email], "subject": subject}
    if copied:
        arguments["cc"] = [copied.email]
    expected = call("send_email", arguments, unordered=tuple(key for key in ("to", "cc") if key in arguments),
                    contains={"body": keywords})  # fmt: skip
    return Draft("email", polite(rng, prompt), (expected,))


def email_search(rng: Random) -> Draft:
    term = rng.choice(SEARCH_TERMS)
    folder = rng.choice([None, None, "sent", "archive"])
    where = {None: "", "sent": " in my sent mail", "archive": " in the archive"}[folder]
    prompt = rng.choice(
        [
            f'Find my emails about "{term}"{where}.',
            f"Search{where or ' my inbox'} for emails mentioning {term}.",
            f"Can you look up the {term} emails{where}?",
        ]
    )
    default = {"folder": "inbox"} if folder is None else None
    arguments = {} if folder is None else {"folder": folder}
    expected = call("search_emails", arguments, optional=default, contains={"query": [term]})
    return Draft("email", polite(rng, prompt), (expected,))


def email_delete(rng: Random) -> Draft:
    email_id = f"msg_{rng.randrange(10000, 99999)}"
    prompt = rng.choice(
        [
            f"Delete email {email_id}.",
            f"That message {email_id} is spam; delete it.",
            f"Permanently remove the email with id {email_id}.",
        ]
    )
    return Draft("email", polite(rng, prompt), (call("delete_email", {"email_id": email_id}),))


def files_list(rng: Random) -> Draft:
    directory = rng.choice(DIRECTORIES)
    prompt = rng.choice(
        [
            f"What's in {directory}?",
            f"List the files in {directory}.",
            f"Show me the contents of {directory}.",
        ]
    )
    return Draft("files", prompt, (call("list_files", {"directory": directory}),))


def files_read(rng: Random) -> Draft:
    path = f"{rng.choice(DIRECTORIES)}/{rng.choice(FILES)}"
    prompt = rng.choice([f"Open {path} for me.", f"What does {path} say?", f"Read me the file {path}."])
    return Draft("files", polite(rng, prompt), (call("read_file", {"path": path}),))


def files_move(rng: Random) -> Draft:
    directory, name = rng.choice(DIRECTORIES), rng.choice(FILES)
    source = f"{directory}/{name}"
    if rng.random() < 0.5:
        target = rng.choice([d for d in DIRECTORIES if d != directory])
        destination = f"{target}/{name}"
        prompt = rng.choice(
            [f"Move {source} to {destination}.", f"Put {source} in {target}, same file name."]
        )
    else:
        stem, dot, ext = name.rpartition(".")
        renamed = f"{stem}_old{dot}{ext}"
        destination = f"{directory}/{renamed}"
        prompt = rng.choice([f"Rename {source} to {renamed}.", f"Change the name of {source} to {renamed}."])
    expected = call("move_file", {"source": source, "destination": destination})
    return Draft("files", polite(rng, prompt), (expected,))


def files_delete(rng: Random) -> Draft:
    path = f"{rng.choice(DIRECTORIES)}/{rng.choice(FILES)}"
    prompt = rng.choice([f"Delete {path}.", f"Get rid of the file {path}.", f"Remove {path} permanently."])
    return Draft("files", polite(rng, prompt), (call("delete_file", {"path": path}),))


def reminder_create(rng: Random) -> Draft:
    (action, keywords), day = rng.choice(REMINDERS), random_date(rng)
    hour, minute = random_time(rng, 7, 21)
    when = f"{say_date(rng, day)} at {say_time(rng, hour, minute)}"
    prompt = rng.choice(
        [
            f"Remind me to {action} on {when}.",
            f"Set a reminder for {when}: {action}.",
            f"On {when}, remind me to {action}.",
        ]
    )
    expected = call(
        "create_reminder",
        {"date": day.isoformat(), "time": f"{hour:02d}:{minute:02d}"},
        contains={"text": keywords},
    )
    return Draft("reminders", polite(rng, prompt), (expected,))


def reminder_list(rng: Random) -> Draft:
    day = random_date(rng)
    said = say_date(rng, day)
    prompt = rng.choice([f"What reminders do I have on {said}?", f"List my reminders for {said}."])
    return Draft("reminders", prompt, (call("list_reminders", {"date": day.isoformat()}),))


def reminder_delete(rng: Random) -> Draft:
    reminder_id = f"rem_{rng.randrange(1000, 9999)}"
    prompt = rng.choice(
        [f"Delete reminder {reminder_id}.", f"Cancel the reminder {reminder_id}, I did it already."]
    )
    return Draft("reminders", polite(rng, prompt), (call("delete_reminder", {"reminder_id": reminder_id}),))


def message_send(rng: Random) -> Draft:
    person, text = rng.choice(PEOPLE), rng.choice(MESSAGES)
    prompt = rng.choice(
        [
            f'Text {person.name}: "{text}"',
            f'Send {person.name} a message saying "{text}".',
            f'Message {person.name} "{text}"',
        ]
    )
    return Draft(
        "messaging", polite(rng, prompt), (call("send_message", {"recipient": person.name, "text": text}),)
    )


def message_broadcast(rng: Random) -> Draft:
    first, second = rng.sample(PEOPLE, 2)
    text = rng.choice(MESSAGES)
    prompt = rng.choice(
        [
            f'Send "{text}" to {first.name} and {second.name}.',
            f'Text both {first.name} and {second.name}: "{text}"',
        ]
    )
    calls = tuple(call("send_message", {"recipient": p.name, "text": text}) for p in (first, second))
    return Draft("messaging", polite(rng, prompt), calls)


def message_read(rng: Random) -> Draft:
    person = rng.choice(PEOPLE)
    if rng.random() < 0.5:
        count = rng.randint(2, 20)
        prompt = f"Show me the last {say_number(rng, count)} messages from {person.name}."
        expected = call("read_messages", {"contact": person.name, "limit": count})
    else:
        prompt = rng.choice(
            [f"What has {person.name} texted me lately?", f"Read my messages from {person.name}."]
        )
        expected = call("read_messages", {"contact": person.name}, optional={"limit": 10})
    return Draft("messaging", prompt, (expected,))


def alarm_set(rng: Random) -> Draft:
    hour, minute = random_time(rng, 5, 10, 5)
    said = say_time(rng, hour, minute)
    arguments = {"time": f"{hour:02d}:{minute:02d}"}
    if rng.random() < 0.4:
        label = rng.choice(["gym", "flight", "meds"])
        return Draft(
            "timers",
            f"Set an alarm for {said} labelled '{label}'.",
            (call("set_alarm", {**arguments, "label": label}),),
        )
    prompt = rng.choice(
        [f"Wake me up at {said}.", f"Set an alarm for {said}.", f"I need an alarm at {said}."]
    )
    return Draft("timers", polite(rng, prompt), (call("set_alarm", arguments),))


def timer_set(rng: Random) -> Draft:
    minutes = rng.choice([3, 5, 8, 10, 12, 15, 20, 25, 30, 45, 60, 90])
    length = say_duration(rng, minutes)
    if rng.random() < 0.4:
        label = rng.choice(["tea", "pasta", "laundry", "pomodoro"])
        prompt = f"Start a timer called '{label}' for {length}."
        return Draft("timers", prompt, (call("set_timer", {"minutes": minutes, "label": label}),))
    prompt = rng.choice(
        [f"Set a timer for {length}.", f"Timer, {length}, please.", f"Count down {length} for me."]
    )
    return Draft("timers", prompt, (call("set_timer", {"minutes": minutes}),))


PERSONAL_INTENTS: tuple[Intent, ...] = (
    calendar_create, calendar_list, calendar_delete, email_send, email_search, email_delete, files_list,
    files_read, files_move, files_delete, reminder_create, reminder_list, reminder_delete, message_send,
    message_broadcast, message_read, alarm_set, timer_set,
)  # fmt: skip
