"""The Guess My City knowledge base: ``archer_jax/envs/data/cities.csv`` and its attribute table.

The external reference is the official city list, ``CITY_LIST`` in ``archer/environment/guess_my_city.py``
of the official ArCHer code (github.com/YifeiZhou02/ArCHer), copied below verbatim, misspellings
included ("Kinshaha", "Taega", "Havanna", "Ethopia"). The knowledge base has one row per entry, in
the same order, with the official string in ``name``.
"""

from __future__ import annotations

import collections
import csv
import json
import unicodedata
from pathlib import Path

import pytest

import archer_jax

DATA = Path(archer_jax.__file__).parent / "envs/data"
CITIES_CSV = DATA / "cities.csv"
ATTRIBUTES_CSV = DATA / "cities_attributes.csv"
DATASET = Path(__file__).resolve().parents[3] / "shared/data/guess_my_city.json"

# YifeiZhou02/ArCHer, archer/environment/guess_my_city.py, CITY_LIST (91 entries).
OFFICIAL_CITY_LIST = (
    "Seoul, South Korea", "Sao Paulo, Brazil", "Bombay, India", "Jakarta, Indonesia", "Karachi, Pakistan",
    "Moscow, Russia", "Istanbul, Turkey", "Shanghai, China", "Tokyo, Japan", "Bangkok, Thailand",
    "Beijing, China", "Delhi, India", "London, UK", "Cairo, Egypt", "Tehran, Iran", "Bogota, Colombia",
    "Bandung, Indonesia", "Tianjin, China", "Lima, Peru", "Lahore, Pakistan", "Bogor, Indonesia",
    "Santiago, Chile", "Shenyang, China", "Calcutta, India", "Wuhan, China", "Sydney, Australia",
    "Guangzhou, China", "Singapore, Singapore", "Madras, India", "Baghdad, Iraq", "Pusan, South Korea",
    "Yokohama, Japan", "Dhaka, Bangladesh", "Berlin, Germany", "Alexandria, Egypt", "Bangalore, India",
    "Malang, Indonesia", "Hyderabad, India", "Chongqing, China", "Haerbin, China", "Ankara, Turkey",
    "Buenos Aires, Argentina", "Chengdu, China", "Ahmedabad, India", "Casablanca, Morocco", "Chicago, USA",
    "Xian, China", "Madrid, Spain", "Surabaya, Indonesia", "Pyong Yang, North Korea", "Nanjing, China",
    "Kinshaha, Congo", "Rome, Italy", "Taipei, China", "Osaka, Japan", "Kiev, Ukraine", "Yangon, Myanmar",
    "Toronto, Canada", "Zibo, China", "Dalian, China", "Taega, South Korea", "Addis Ababa, Ethopia",
    "Jinan, China", "Salvador, Brazil", "Inchon, South Korea", "Semarang, Indonesia", "Giza, Egypt",
    "Changchun, China", "Havanna, Cuba", "Nagoya, Japan", "Belo Horizonte, Brazil", "Paris, France",
    "Tashkent, Uzbekistan", "Fortaleza, Brazil", "Sukabumi, Indonesia", "Cali, Colombia", "Guayaquil, Ecuador",
    "Qingdao, China", "Izmir, Turkey", "Cirebon, Indonesia", "Taiyuan, China", "Brasilia, Brazil",
    "Bucuresti, Romania", "Faisalabad, Pakistan", "Medan, Indonesia", "Houston, USA", "Mashhad, Iran",
    "Medellin, Colombia", "Kanpur, India", "Budapest, Hungary", "Caracas, Venezuela",
)

# guess_my_city.json (the official offline data) has 99 distinct words: 90 of the official cities
# (every one but Seoul) and these 9, which are not in the official environment's list.
DATASET_EXTRAS = {
    "abidjan,cote d’ivorie", "ho chi minh city,vietnam", "hong kong,china", "los angeles,usa", "mexico city,mexico",
    "new york,usa", "quezon city,philippines", "rio de janeiro,brazil", "st petersburg,russia",
}

NAME_COLUMNS = ("name", "city", "aliases")
COLUMNS = (
    *NAME_COLUMNS, "country", "continent", "region", "province", "hemisphere_ns", "hemisphere_ew", "coastal",
    "national_capital", "provincial_capital", "main_language", "population_millions", "on_river",
    "country_population_over_100m", "has_metro", "olympics_host", "in_tropics", "island", "elevation_over_1000m",
)
CONTINENTS = {"Asia", "Africa", "Europe", "North America", "South America", "Oceania"}
REGIONS = {
    "East Asia", "Southeast Asia", "South Asia", "Central Asia", "Middle East", "North Africa", "East Africa",
    "Central Africa", "Western Europe", "Northern Europe", "Central Europe", "Southern Europe", "Eastern Europe",
    "Southeast Europe", "North America", "Caribbean", "South America", "Australia and New Zealand",
}
HEMISPHERES = {"hemisphere_ns": {"north", "south"}, "hemisphere_ew": {"east", "west"}}
MULTI_VALUED = {"continent", "region"}  # ";"-separated where a city has several (Istanbul: Europe;Asia)
KINDS = {"bool", "category", "number"}

# Pairs of cities whose attribute rows may coincide (none: every city can be told apart).
ALLOWED_TWINS: set[frozenset[str]] = set()


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


ROWS = _read(CITIES_CSV)
ATTRS = {r["attribute"]: r for r in _read(ATTRIBUTES_CSV)}
BY_CITY = {r["city"]: r for r in ROWS}


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKD", text)
    return "".join(c for c in text if not unicodedata.combining(c)).lower().replace("’", "'")


def _names(row: dict[str, str]) -> set[str]:
    """Every string that counts as naming the city (folded): proper name, official spelling, aliases."""
    return {_fold(row["city"]), _fold(row["name"].split(",")[0])} | {_fold(a) for a in row["aliases"].split(";") if a}


def _values(row: dict[str, str], column: str) -> list[str]:
    return row[column].split(";") if column in MULTI_VALUED else [row[column]]


def _yes(city: str, attribute: str) -> bool:
    return BY_CITY[city][attribute] == "1"


# ---------------------------------------------------------------- the official list


def test_one_row_per_official_city_in_official_order():
    assert len(OFFICIAL_CITY_LIST) == 91 and len(set(OFFICIAL_CITY_LIST)) == 91
    assert len(ROWS) == len(OFFICIAL_CITY_LIST)
    assert [r["name"] for r in ROWS] == list(OFFICIAL_CITY_LIST)


def test_official_spelling_and_proper_name_both_name_the_city():
    for row in ROWS:
        official = row["name"].split(",")[0].strip()
        aliases = [a for a in row["aliases"].split(";") if a]
        assert row["city"] and all(a.strip() == a and a for a in aliases), row["name"]
        assert official in {row["city"], *aliases}, f"{row['name']}: official spelling missing from city/aliases"
        assert row["city"] not in aliases and len(set(aliases)) == len(aliases), row["name"]
    # The misspellings and old names of the official list, and their correct forms.
    for city, alias in [("Mumbai", "Bombay"), ("Chennai", "Madras"), ("Kolkata", "Calcutta"), ("Busan", "Pusan"),
                        ("Incheon", "Inchon"), ("Daegu", "Taega"), ("Daegu", "Taegu"), ("Harbin", "Haerbin"),
                        ("Xi'an", "Xian"), ("Kyiv", "Kiev"), ("Bucharest", "Bucuresti"), ("Pyongyang", "Pyong Yang"),
                        ("Havana", "Havanna"), ("Kinshasa", "Kinshaha"), ("Bengaluru", "Bangalore")]:
        assert alias in BY_CITY[city]["aliases"].split(";"), (city, alias)


def test_no_two_cities_share_a_name():
    owner: dict[str, str] = {}
    for row in ROWS:
        for n in _names(row):
            assert owner.setdefault(n, row["city"]) == row["city"], f"{n!r} names {owner[n]} and {row['city']}"


def test_dataset_words_are_official_cities_or_known_extras():
    if not DATASET.exists():
        pytest.skip(f"offline dataset not found at {DATASET} (shared/data/guess_my_city.json next to the repo)")
    words = {d["word"] for d in json.loads(DATASET.read_text(encoding="utf-8"))}
    by_word = {r["name"].lower().replace(", ", ","): r for r in ROWS}
    assert words - set(by_word) == DATASET_EXTRAS
    assert set(by_word) - words == {"seoul,south korea"}


# ---------------------------------------------------------------- the attribute table


def test_columns_and_attribute_definitions():
    assert tuple(ROWS[0].keys()) == COLUMNS
    assert list(ATTRS) == [c for c in COLUMNS if c not in NAME_COLUMNS]
    for name, attr in ATTRS.items():
        assert attr["kind"] in KINDS, name
        assert attr["question"].endswith("?"), name
        assert attr["definition"].strip() and attr["definition"].rstrip().endswith((".", ")")), name
        paraphrases = attr["paraphrases"].split("|")
        assert len(paraphrases) >= 3 and len(set(paraphrases)) == len(paraphrases), name
        for p in paraphrases:
            assert p and p == p.lower() and p == p.strip() and "?" not in p, (name, p)
            assert ("{value}" in p) == (attr["kind"] != "bool"), (name, p)
        assert ("{value}" in attr["question"]) == (attr["kind"] != "bool"), name
    assert ATTRS["population_millions"]["kind"] == "number"
    for name in ("country", "continent", "region", "main_language", "province", "hemisphere_ns", "hemisphere_ew"):
        assert ATTRS[name]["kind"] == "category", name


def test_every_value_is_valid():
    for row in ROWS:
        where = row["name"]
        for column, value in row.items():
            assert value == value.strip(), (where, column)
            if column in NAME_COLUMNS:
                continue
            kind = ATTRS[column]["kind"]
            if kind == "bool":
                assert value in ("0", "1"), (where, column, value)
            elif kind == "number":
                assert float(value) > 0, (where, column, value)
            else:
                parts = _values(row, column)
                assert all(parts) and len(set(parts)) == len(parts), (where, column, value)
        assert set(_values(row, "continent")) <= CONTINENTS, where
        assert set(_values(row, "region")) <= REGIONS, where
        for column, allowed in HEMISPHERES.items():
            assert row[column] in allowed, (where, column)
        assert 0.1 < float(row["population_millions"]) < 40, where  # city proper, millions
        assert not (row["national_capital"] == "1" and row["provincial_capital"] == "1"), where


def test_country_level_facts_agree_within_a_country():
    by_country = collections.defaultdict(list)
    for row in ROWS:
        by_country[row["country"]].append(row)
    for country, rows in by_country.items():
        assert len({r["country_population_over_100m"] for r in rows}) == 1, country
        assert sum(r["national_capital"] == "1" for r in rows) <= 1, country
    over_100m = {c for c, rows in by_country.items() if rows[0]["country_population_over_100m"] == "1"}
    assert over_100m == {"China", "India", "United States", "Indonesia", "Pakistan", "Brazil", "Bangladesh",
                         "Russia", "Ethiopia", "Japan", "Egypt", "Democratic Republic of the Congo"}


def test_no_attribute_but_province_says_the_city_name():
    """Only ``province`` values may contain a name of the city (city-level units such as "Tokyo
    Metropolis"), and Singapore's country; an oracle must never utter those."""
    leaks = set()
    for row in ROWS:
        for column, value in row.items():
            if column not in NAME_COLUMNS and any(n in _fold(value) for n in _names(row)):
                leaks.add((row["city"], column))
    assert {(c, col) for c, col in leaks if col != "province"} == {("Singapore", "country")}


# ---------------------------------------------------------------- every city can be told apart


def _signature(row: dict[str, str], *, coarse: bool) -> tuple:
    out = []
    for column, value in row.items():
        if column in NAME_COLUMNS:
            continue
        if coarse and column == "population_millions":  # what "more than N million?" questions can tell
            out.append(tuple(float(value) > t for t in (1, 2, 5, 10, 20)))
        elif coarse and any(n in _fold(value) for n in _names(row)):
            out.append(None)  # a value that names the city cannot be asked about without naming it
        else:
            out.append(value)
    return tuple(out)


@pytest.mark.parametrize("coarse", [False, True], ids=["rows", "without-naming"])
def test_no_two_cities_have_the_same_attributes(coarse):
    seen = collections.defaultdict(list)
    for row in ROWS:
        seen[_signature(row, coarse=coarse)].append(row["city"])
    twins = [cities for cities in seen.values() if len(cities) > 1]
    assert all(frozenset(c) in ALLOWED_TWINS for c in twins), twins


# ---------------------------------------------------------------- spot checks


def test_spot_checks():
    tokyo, bogota, sydney = BY_CITY["Tokyo"], BY_CITY["Bogotá"], BY_CITY["Sydney"]
    assert tokyo["continent"] == "Asia" and _yes("Tokyo", "coastal") and _yes("Tokyo", "national_capital")
    assert not _yes("Bogotá", "coastal") and _yes("Bogotá", "national_capital")
    assert bogota["main_language"] == "Spanish" and bogota["continent"] == "South America"
    assert bogota["hemisphere_ns"] == "north" and bogota["hemisphere_ew"] == "west"
    assert _yes("Bogotá", "elevation_over_1000m") and _yes("Bogotá", "in_tropics")
    assert sydney["continent"] == "Oceania" and sydney["hemisphere_ns"] == "south"
    assert not _yes("Sydney", "national_capital") and _yes("Sydney", "provincial_capital")
    assert not _yes("Moscow", "coastal") and _yes("Moscow", "national_capital")
    assert not _yes("Chicago", "national_capital") and BY_CITY["Chicago"]["country"] == "United States"
    assert BY_CITY["Istanbul"]["continent"] == "Europe;Asia" and not _yes("Istanbul", "national_capital")
    assert BY_CITY["Kinshasa"]["country"] == "Democratic Republic of the Congo"
    assert BY_CITY["Medan"]["hemisphere_ns"] == "north" and BY_CITY["Jakarta"]["hemisphere_ns"] == "south"
    assert BY_CITY["Singapore"]["hemisphere_ns"] == "north" and _yes("Singapore", "island")
    assert BY_CITY["Paris"]["hemisphere_ew"] == "east" and BY_CITY["Madrid"]["hemisphere_ew"] == "west"
    assert not _yes("Yangon", "national_capital") and not _yes("Karachi", "national_capital")
    assert _yes("Cairo", "on_river") and _yes("London", "on_river") and not _yes("Tehran", "on_river")
    assert float(BY_CITY["Chongqing"]["population_millions"]) > float(BY_CITY["Shanghai"]["population_millions"]) > 20
    assert 0.3 < float(BY_CITY["Sukabumi"]["population_millions"]) < 0.4  # the smallest city in the list
    olympic = {r["city"] for r in ROWS if r["olympics_host"] == "1"}
    assert olympic == {"Seoul", "Moscow", "Tokyo", "Beijing", "London", "Sydney", "Berlin", "Rome", "Paris"}
    high = {r["city"] for r in ROWS if r["elevation_over_1000m"] == "1"}
    assert high == {"Bogotá", "Addis Ababa", "Medellín", "Tehran", "Brasília", "Cali"}
    assert {r["city"] for r in ROWS if r["country"] == "China"} >= {"Beijing", "Shanghai", "Harbin", "Zibo"}
    assert BY_CITY["Taipei"]["country"] == "Taiwan"  # the official list writes "Taipei, China"
