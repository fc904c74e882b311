"""Fixtures of the LASP tests: the kitchen case files shipped as package data, and small problems."""

from __future__ import annotations

from pathlib import Path

import pytest

KITCHEN = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "lasp" / "kitchen"
JACKAL = Path(__file__).resolve().parents[2] / "robot_app" / "data" / "lasp" / "jackal"


@pytest.fixture(scope="session")
def kitchen_dir() -> Path:
    return KITCHEN


@pytest.fixture(scope="session")
def cases():
    from core.lasp.benchmark import load_cases

    return load_cases(KITCHEN)


def read(name: str) -> str:
    return (KITCHEN / name).read_text(encoding="utf-8")


@pytest.fixture
def oracle_milk():
    from core.lasp.model import Task

    return Task.from_pddl(read("domain.pddl"), read("env2_heat_milk.pddl"))


# A catalogue of small problems with plans known to be valid or invalid (docs/design.md, "Conventions").
SMALL_DOMAIN = """
(define (domain lamp)
  (:requirements :strips :typing :negative-preconditions :numeric-fluents)
  (:types switch room)
  (:predicates (on ?s - switch) (lit ?r - room) (wired ?s - switch ?r - room) (broken ?s - switch))
  (:functions (presses) (limit))
  (:action press
    :parameters (?s - switch ?r - room)
    :precondition (and (wired ?s ?r) (not (broken ?s)) (< (presses) (limit)))
    :effect (and (on ?s) (lit ?r) (increase (presses) 1))))
"""
SMALL_PROBLEMS = {
    "two-rooms": ("""
(define (problem two-rooms) (:domain lamp)
  (:objects s1 s2 - switch kitchen hall - room)
  (:init (wired s1 kitchen) (wired s2 hall) (= (presses) 0) (= (limit) 5))
  (:goal (and (lit kitchen) (lit hall))))""",
                  [["(press s1 kitchen)", "(press s2 hall)"]],
                  [["(press s1 kitchen)"], ["(press s1 hall)", "(press s2 hall)"]]),
    "broken": ("""
(define (problem broken) (:domain lamp)
  (:objects s1 - switch kitchen - room)
  (:init (wired s1 kitchen) (broken s1) (= (presses) 0) (= (limit) 5))
  (:goal (lit kitchen)))""", [], [["(press s1 kitchen)"]]),
    "limit": ("""
(define (problem limit) (:domain lamp)
  (:objects s1 s2 - switch kitchen hall - room)
  (:init (wired s1 kitchen) (wired s2 hall) (= (presses) 0) (= (limit) 1))
  (:goal (and (lit kitchen) (lit hall))))""", [], [["(press s1 kitchen)", "(press s2 hall)"]]),
}
