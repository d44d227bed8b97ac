"""The Twenty Questions knowledge base: the official object list, well-formed yes/no tables, and facts.

Reads ``archer_jax/envs/data/twenty_questions.csv`` (one row per object, one 0/1 column per attribute)
and ``twenty_questions_attributes.csv`` (question, paraphrases and definition of each attribute)
with the ``csv`` module only, and checks them against the official object list reproduced below.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

import archer_jax

DATA = Path(archer_jax.__file__).parent / "envs/data"
OBJECTS_CSV = DATA / "twenty_questions.csv"
ATTRIBUTES_CSV = DATA / "twenty_questions_attributes.csv"

# External reference: the official Twenty Questions object list (157 objects in 17 categories;
# ";"-separated synonyms, the first name primary), as published with the ArCHer / LMRL-Gym game.
OFFICIAL_OBJECTS = {
    "Sports": ["Basketball", "Football", "Baseball", "Soccer ball", "Golf ball", "Tennis ball", "Volleyball", "Tennis racket", "Baseball bat", "Helmet"],
    "Animals": ["Cat", "Dog", "Horse", "Cow", "Sheep", "Rabbit", "Lion", "Tiger", "Bear", "Elephant"],
    "Fruits": ["Apple", "Banana", "Orange", "Strawberry", "Grape", "Watermelon", "Pineapple", "Mango", "Cantaloupe", "Peach"],
    "Vehicles": ["Car", "Truck", "Motorcycle", "Boat", "Airplane;Plane", "Train", "Bus", "Helicopter", "Scooter", "Ship"],
    "Clothes": ["Shirt", "Pants;Pant;Pair of pants", "Jacket", "Dress", "Skirt", "Belt", "Shoes;Shoe;Pair of shoes", "Boots;Boot;Pair of boots", "Socks;Sock;Pair of socks", "Hat", "Scarf"],
    "Electronics": ["Computer", "Smartphone", "Television;TV", "Headphone;Headphones;Pair of headphones", "Monitor;Computer monitor", "Camera", "Microwave;Microwave oven", "Refrigerator", "Blender", "Computer keyboard;Keyboard"],
    "Musical Instruments": ["Piano", "Guitar", "Drum;Drums", "Violin", "Saxophone", "Flute", "Trumpet", "Clarinet", "Harp", "Trombone"],
    "Furniture": ["Chair", "Table", "Bed", "Desk", "Couch", "Dresser", "Bookcase", "Nightstand", "Mattress", "Pillow"],
    "Office Supplies": ["Pen", "Paper;Piece of paper", "Stapler", "Printer", "Calculator", "Battery;Battery pack;Pack of batteries", "Toothbrush", "Toothpaste", "Pencil", "Sharpie", "Scissors;Pair of scissors", "Key", "Diary", "Calendar"],
    "Vegetables": ["Carrot", "Potato", "Broccoli", "Tomato", "Onion", "Spinach", "Corn", "Peas;Pea", "Celery", "Cucumber"],
    "Art": ["Painting;Canvas painting;Oil painting;Watercolor painting", "Paintbrush", "Canvas;Painting canvas", "Eraser;Pencil eraser", "Marker", "Glue;Glue stick;Bottle of glue", "Sculpture"],
    "Kitchen Tools": ["Knife", "Spoon", "Fork", "Plate", "Bowl", "Cooking pot;Pot", "Pan;Saucepan;Frying pan", "Cup", "Chopstick;Chopsticks;Pair of chopsticks", "Whisk"],
    "Nature": ["Rock", "Tree", "Bush", "Mountain", "Forest", "Ocean", "Sea", "Lake", "River", "Meteorite", "Cactus"],
    "Toys": ["Lego;Lego set", "Doll;Toy doll;Plush doll", "Kite", "Puzzle;Jigsaw puzzle"],
    "Jewelry": ["Earring;Earrings;Pair of earrings", "Necklace", "Bracelet", "Ring", "Brooch", "Hairclip", "Pendant", "Watch", "Locket"],
    "Garden Supplies": ["Gloves;Glove;Pair of gloves", "Shovel", "Rake", "Watering can", "Lawn mower"],
    "Tools": ["Hammer", "Screwdriver", "Wrench", "Saw", "Pliers;plier;Pair of pliers", "Drill"],
}

# The official per-category counts (they add up to 157).
OFFICIAL_COUNTS = {
    "Sports": 10, "Animals": 10, "Fruits": 10, "Vehicles": 10, "Clothes": 11, "Electronics": 10,
    "Musical Instruments": 10, "Furniture": 10, "Office Supplies": 14, "Vegetables": 10, "Art": 7,
    "Kitchen Tools": 10, "Nature": 11, "Toys": 4, "Jewelry": 9, "Garden Supplies": 5, "Tools": 6,
}

# Pairs of objects that no yes/no attribute in the table can tell apart, each with the reason.
# Empty: every object has its own attribute vector.
ALLOWED_TWINS: set[frozenset[str]] = set()

# Attributes every version of the table must have (the oracle's core vocabulary).
REQUIRED_ATTRIBUTES = {
    "living", "animal", "plant", "edible", "fruit_or_vegetable", "electronic", "needs_electricity",
    "made_of_metal", "made_of_wood", "made_of_fabric", "made_of_plastic", "made_of_glass", "made_of_paper",
    "bigger_than_breadbox", "bigger_than_person", "handheld", "found_in_kitchen", "found_in_office",
    "found_in_bedroom", "found_in_living_room", "found_outdoors", "natural", "used_for_sport", "used_for_music",
    "used_for_transport", "has_wheels", "has_legs", "has_strings", "worn", "used_for_writing_or_drawing",
    "has_a_blade_or_sharp_edge", "has_a_screen", "has_an_engine", "round", "carries_people", "used_with_water",
}

SUBSET_10 = ["Football", "Dog", "Banana", "Truck", "Pants", "Computer", "Piano", "Chair", "Pen", "Scissors"]

# (object, attribute, expected answer): commonsense facts a reader can check at a glance.
SPOT_CHECKS = [
    ("Dog", "living", 1), ("Dog", "animal", 1), ("Dog", "has_legs", 1), ("Dog", "edible", 0),
    ("Piano", "used_for_music", 1), ("Piano", "has_strings", 1), ("Piano", "bigger_than_breadbox", 1),
    ("Piano", "has_keys_to_press", 1), ("Piano", "handheld", 0),
    ("Banana", "edible", 1), ("Banana", "is_yellow", 1), ("Banana", "living", 0), ("Banana", "electronic", 0),
    ("Car", "has_wheels", 1), ("Car", "has_an_engine", 1), ("Car", "carries_people", 1), ("Car", "natural", 0),
    ("Knife", "has_a_blade_or_sharp_edge", 1), ("Knife", "found_in_kitchen", 1), ("Knife", "made_of_metal", 1),
    ("Ocean", "natural", 1), ("Ocean", "handheld", 0), ("Ocean", "salty", 1), ("Ocean", "living", 0),
    ("Lake", "salty", 0), ("Airplane", "can_fly", 1), ("Helicopter", "can_fly", 1), ("Truck", "can_fly", 0),
    ("Tiger", "has_stripes", 1), ("Elephant", "has_a_trunk", 1), ("Elephant", "bigger_than_person", 1),
    ("Cat", "pet", 1), ("Lion", "wild_animal", 1), ("Cow", "eats_meat", 0),
    ("Football", "used_for_sport", 1), ("Football", "round", 0), ("Basketball", "round", 1),
    ("Pants", "worn", 1), ("Pants", "made_of_fabric", 1), ("Computer", "has_a_screen", 1),
    ("Computer", "needs_electricity", 1), ("Chair", "has_legs", 1), ("Chair", "used_for_sitting", 1),
    ("Pen", "used_for_writing_or_drawing", 1), ("Pen", "uses_ink", 1), ("Pencil", "uses_ink", 0),
    ("Scissors", "has_a_blade_or_sharp_edge", 1), ("Scissors", "handheld", 1),
    ("Toothbrush", "used_for_cleaning_teeth", 1), ("Carrot", "grows_underground", 1), ("Apple", "grows_on_trees", 1),
    ("Rock", "living", 0), ("Tree", "living", 1), ("Tree", "made_of_wood", 1), ("Cactus", "prickly", 1),
    ("Guitar", "has_strings", 1), ("Trumpet", "played_by_blowing", 1), ("Kite", "can_fly", 1),
    ("Ring", "worn", 1), ("Watch", "worn_on_hands_or_wrists", 1), ("Shovel", "used_for_gardening", 1),
    ("Hammer", "kept_in_a_toolbox", 1), ("Refrigerator", "found_in_kitchen", 1), ("Boat", "travels_on_water", 1),
]


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


@pytest.fixture(scope="module")
def objects():
    header, rows = _rows(OBJECTS_CSV)
    assert header[:2] == ["names", "category"]
    return header[2:], rows


@pytest.fixture(scope="module")
def attributes():
    header, rows = _rows(ATTRIBUTES_CSV)
    assert header == ["attribute", "question", "paraphrases", "definition"]
    return rows


@pytest.fixture(scope="module")
def table(objects):
    """primary name -> {attribute: 0/1}"""
    columns, rows = objects
    return {row["names"].split(";")[0]: {c: int(row[c]) for c in columns} for row in rows}


def test_official_objects_and_categories(objects):
    _, rows = objects
    assert sum(OFFICIAL_COUNTS.values()) == 157
    assert {c: len(v) for c, v in OFFICIAL_OBJECTS.items()} == OFFICIAL_COUNTS
    assert len(rows) == 157
    expected = [(names, cat) for cat, objs in OFFICIAL_OBJECTS.items() for names in objs]
    assert [(r["names"], r["category"]) for r in rows] == expected  # names, synonyms, order, categories
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["category"]] = counts.get(r["category"], 0) + 1
    assert counts == OFFICIAL_COUNTS
    assert len(counts) == 17
    primaries = [r["names"].split(";")[0] for r in rows]
    assert len(set(primaries)) == 157


def test_every_cell_is_zero_or_one(objects):
    columns, rows = objects
    for r in rows:
        assert None not in r, f"{r['names']}: too many cells"
        for c in columns:
            assert r[c] in ("0", "1"), f"{r['names']}.{c} = {r[c]!r}"


def test_attribute_descriptions(objects, attributes):
    columns, _ = objects
    assert len(columns) >= 30
    assert len(set(columns)) == len(columns)
    assert all(c == c.lower() and c.replace("_", "").isalnum() for c in columns)  # snake_case
    assert [a["attribute"] for a in attributes] == columns
    for a in attributes:
        assert a["question"].strip().endswith("?"), a["attribute"]
        paraphrases = a["paraphrases"].split("|")
        assert len(paraphrases) >= 3, a["attribute"]
        for p in paraphrases:
            assert p.strip() and p == p.lower() and not p.endswith("?"), (a["attribute"], p)
        assert len(a["definition"].split()) >= 3, a["attribute"]
    assert REQUIRED_ATTRIBUTES <= set(columns), REQUIRED_ATTRIBUTES - set(columns)


def test_paraphrases_are_unambiguous(attributes):
    owner: dict[str, str] = {}
    for a in attributes:
        for p in a["paraphrases"].split("|"):
            assert p not in owner, f"{p!r} belongs to both {owner[p]} and {a['attribute']}"
            owner[p] = a["attribute"]


def test_each_attribute_splits_the_objects(objects, table):
    columns, _ = objects
    for c in columns:
        yes = sum(v[c] for v in table.values())
        assert yes >= 2 and len(table) - yes >= 2, f"{c}: {yes} yes"


def test_no_two_objects_share_an_attribute_vector(objects, table):
    columns, _ = objects
    by_vector: dict[tuple[int, ...], list[str]] = {}
    for name, v in table.items():
        by_vector.setdefault(tuple(v[c] for c in columns), []).append(name)
    twins = {frozenset(pair) for group in by_vector.values() for pair in itertools.combinations(group, 2)}
    assert twins <= ALLOWED_TWINS, sorted(sorted(t) for t in twins - ALLOWED_TWINS)


def test_ten_object_subset_is_pairwise_distinct(objects, table):
    columns, _ = objects
    assert set(SUBSET_10) <= set(table)
    for a, b in itertools.combinations(SUBSET_10, 2):
        assert any(table[a][c] != table[b][c] for c in columns), (a, b)


@pytest.mark.parametrize("name,attribute,expected", SPOT_CHECKS)
def test_spot_check_facts(table, name, attribute, expected):
    assert table[name][attribute] == expected
