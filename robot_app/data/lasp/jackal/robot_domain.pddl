; The robot's own Jackal jobs domain (see domain.pddl): it does not know that a closed gate blocks a
; route, that a leg needs enough battery, nor that parcels have a mass the cargo deck must carry.
; A comment after a predicate or function says what it means; the diagnosers read these comments.
(define (domain jackal-jobs)
  (:requirements :strips :typing :negative-preconditions :numeric-fluents)
  (:types robot place gate parcel - object)

  (:predicates
    (at ?r - robot ?p - place)               ; the robot is at the landmark
    (connected ?a - place ?b - place)        ; a drivable route leads from one landmark to the other
    (gate-on ?g - gate ?a - place ?b - place) ; the gate stands on the route between the two landmarks
    (path-clear ?a - place ?b - place)       ; the route between the landmarks is clear, not blocked by a closed gate
    (gate-open ?g - gate)                    ; the gate is open
    (is-dock ?p - place)                     ; the landmark has a charging dock
    (inspected ?p - place)                   ; camera photos of the landmark were taken
    (parcel-at ?x - parcel ?p - place)       ; the parcel lies at the landmark
    (carrying ?r - robot ?x - parcel))       ; the parcel is loaded on the robot's cargo deck

  (:functions
    (battery ?r - robot)                     ; the robot's battery charge, percent
    (leg-energy ?a - place ?b - place))      ; battery charge a drive between the landmarks uses, percent

  (:action navigate  ; drive ?r from ?from to ?to
    :parameters (?r - robot ?from - place ?to - place)
    :precondition (and (at ?r ?from) (connected ?from ?to))
    :effect (and (at ?r ?to) (not (at ?r ?from)) (decrease (battery ?r) (leg-energy ?from ?to))))

  (:action open-gate  ; open ?g between ?a and ?b
    :parameters (?r - robot ?g - gate ?a - place ?b - place)
    :precondition (and (at ?r ?a) (gate-on ?g ?a ?b) (not (gate-open ?g)))
    :effect (and (gate-open ?g) (path-clear ?a ?b) (path-clear ?b ?a)))

  (:action inspect  ; inspect ?p
    :parameters (?r - robot ?p - place)
    :precondition (and (at ?r ?p))
    :effect (and (inspected ?p) (decrease (battery ?r) 2)))

  (:action load  ; load ?x onto ?r at ?p
    :parameters (?r - robot ?x - parcel ?p - place)
    :precondition (and (at ?r ?p) (parcel-at ?x ?p))
    :effect (and (carrying ?r ?x) (not (parcel-at ?x ?p))))

  (:action unload  ; unload ?x from ?r at ?p
    :parameters (?r - robot ?x - parcel ?p - place)
    :precondition (and (at ?r ?p) (carrying ?r ?x))
    :effect (and (parcel-at ?x ?p) (not (carrying ?r ?x))))

  (:action charge  ; charge ?r at the dock ?p
    :parameters (?r - robot ?p - place)
    :precondition (and (at ?r ?p) (is-dock ?p))
    :effect (and (assign (battery ?r) 100)))
)
