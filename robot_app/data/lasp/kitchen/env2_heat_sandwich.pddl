; Environment 2, task "heat sandwich": heat the sandwich and place it on a plate (optimal: 10 steps).
(define (problem heat-sandwich)
  (:domain kitchen)
  (:objects
    robot1 - robot
    milk - liquid
    microwave fridge - receptacle
    table - surface
    glove cup plate sandwich bottle knife - item)
  (:init
    (is-empty-handed robot1)
    (= (lift-capacity robot1) 3) (= (tolerance-temperature robot1) 45)
    (is-microwave microwave)
    (can-support table) (can-support plate)
    (on glove table) (on cup table) (on plate table) (on knife table)
    (in sandwich fridge) (in bottle fridge)
    (liquid-in milk bottle)
    (is-heat-insulation glove)
    (is-microwave-safe cup) (is-microwave-safe plate) (is-microwave-safe sandwich)
    (can-contain-liquid cup) (can-contain-liquid bottle)
    (= (weight glove) 0.1) (= (weight cup) 0.3) (= (weight plate) 0.5) (= (weight sandwich) 0.3)
    (= (weight bottle) 1.1) (= (weight knife) 0.1)
    (= (temperature glove) 20) (= (temperature cup) 20) (= (temperature plate) 20)
    (= (temperature sandwich) 4) (= (temperature bottle) 4) (= (temperature knife) 20)
    (= (liquid-temperature milk) 4))
  (:goal (and (heated sandwich) (on sandwich plate))))
