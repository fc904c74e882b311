; Robot's problem for LASP case 8: env2_heat_sandwich.pddl without what the robot does not know (cases.json).
(define (problem heat-sandwich)
  (:domain kitchen)
  (:objects
    robot1 - robot
    milk - liquid
    microwave fridge - receptacle
    table - surface
    cup plate sandwich bottle knife - item)
  (:init
    (is-empty-handed robot1)
    (= (lift-capacity robot1) 3)
    (is-microwave microwave)
    (can-support table) (can-support plate)
    (on cup table) (on plate table) (on knife table)
    (in sandwich fridge) (in bottle fridge)
    (liquid-in milk bottle)
    (is-microwave-safe cup) (is-microwave-safe plate) (is-microwave-safe sandwich)
    (can-contain-liquid cup) (can-contain-liquid bottle)
    (= (weight cup) 0.3) (= (weight plate) 0.5) (= (weight sandwich) 0.3)
    (= (weight bottle) 1.1) (= (weight knife) 0.1)
    (= (liquid-temperature milk) 4))
  (:goal (and (heated sandwich) (on sandwich plate))))
