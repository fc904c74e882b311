; Kitchen domain for the LASP benchmark (after Chen et al., RSS 2024, Sec. V and Table I): the
; complete ("oracle") knowledge that the simulated environment executes. The robot's own domains for
; the nine cases (case*_domain.pddl) are this file with knowledge removed.
; A comment after a predicate or function says what it means; the diagnosers read these comments.
(define (domain kitchen)
  (:requirements :strips :typing :negative-preconditions :disjunctive-preconditions
                 :existential-preconditions :equality :numeric-fluents)
  (:types
    robot liquid thing - object
    item receptacle surface - thing)

  (:predicates
    (holding ?r - robot ?o - item)        ; the robot's gripper is holding the item in its hand
    (is-empty-handed ?r - robot)          ; the robot's hand is empty, its gripper holds nothing
    (is-open ?c - thing)                  ; the door of the receptacle is open, not closed
    (in ?o - item ?c - thing)             ; the item is inside the receptacle
    (on ?o - item ?l - thing)             ; the item stands on top of the surface or the item
    (is-microwave ?c - thing)             ; the receptacle is a microwave oven that heats things
    (is-fruit ?o - item)                  ; the item is a piece of fruit
    (is-heat-insulation ?o - item)        ; the item insulates heat, a glove or mitt that protects the hand from hot things
    (wearing ?r - robot ?o - item)        ; the robot wears the item on its hand
    (liquid-in ?q - liquid ?o - item)     ; the liquid is inside the container
    (is-microwave-safe ?o - item)         ; the item may go into a microwave oven without damage
    (can-support ?l - thing)              ; other things can be put on top of it
    (can-contain-liquid ?o - item)        ; the item is a vessel that can contain and hold a liquid without spilling or leaking
    (heated ?o - item)                    ; the item has been heated up in a microwave
    (liquid-heated ?q - liquid))          ; the liquid has been heated up

  (:functions
    (temperature ?o - item)               ; how hot or cold the item is, its temperature in degrees Celsius
    (tolerance-temperature ?r - robot)    ; the hottest temperature the robot's hand can touch and tolerate without harm, degrees Celsius
    (liquid-temperature ?q - liquid)      ; how hot or cold the liquid is, its temperature in degrees Celsius
    (weight ?o - item)                    ; how heavy the item is, its weight in kilograms
    (lift-capacity ?r - robot))           ; the heaviest weight the robot's arm can lift, in kilograms

  (:action pick
    :parameters (?r - robot ?o - item ?l - thing)
    :precondition (and (is-empty-handed ?r)
                       (or (on ?o ?l) (and (in ?o ?l) (is-open ?l)))
                       (<= (weight ?o) (lift-capacity ?r))
                       (<= (temperature ?o) (tolerance-temperature ?r)))
    :effect (and (holding ?r ?o) (not (is-empty-handed ?r)) (not (on ?o ?l)) (not (in ?o ?l))))

  (:action place-on
    :parameters (?r - robot ?o - item ?l - thing)
    :precondition (and (holding ?r ?o) (can-support ?l) (not (= ?o ?l)))
    :effect (and (on ?o ?l) (is-empty-handed ?r) (not (holding ?r ?o))))

  (:action place-in
    :parameters (?r - robot ?o - item ?c - receptacle)
    :precondition (and (holding ?r ?o) (is-open ?c))
    :effect (and (in ?o ?c) (is-empty-handed ?r) (not (holding ?r ?o))))

  (:action open
    :parameters (?r - robot ?c - receptacle)
    :precondition (and (not (is-open ?c)))
    :effect (and (is-open ?c)))

  (:action close
    :parameters (?r - robot ?c - receptacle)
    :precondition (and (is-open ?c))
    :effect (and (not (is-open ?c))))

  (:action heat
    :parameters (?r - robot ?o - item ?c - receptacle)
    :precondition (and (in ?o ?c) (is-microwave ?c) (is-microwave-safe ?o) (not (is-open ?c)))
    :effect (and (heated ?o) (increase (temperature ?o) 60)))

  (:action heat-liquid
    :parameters (?r - robot ?q - liquid ?o - item ?c - receptacle)
    :precondition (and (liquid-in ?q ?o) (in ?o ?c) (is-microwave ?c) (is-microwave-safe ?o)
                       (not (is-open ?c)))
    :effect (and (liquid-heated ?q) (increase (liquid-temperature ?q) 60)
                 (increase (temperature ?o) 60)))

  (:action wear
    :parameters (?r - robot ?g - item ?l - thing)
    :precondition (and (on ?g ?l) (is-heat-insulation ?g) (is-empty-handed ?r))
    :effect (and (wearing ?r ?g) (not (on ?g ?l)) (increase (tolerance-temperature ?r) 100)))

  (:action pour
    :parameters (?r - robot ?q - liquid ?from - item ?to - item ?l - thing)
    :precondition (and (holding ?r ?from) (liquid-in ?q ?from) (on ?to ?l) (not (= ?from ?to))
                       (can-contain-liquid ?to))
    :effect (and (liquid-in ?q ?to) (not (liquid-in ?q ?from))))
)
