; Robot's problem for LASP case 9: env2_heat_milk.pddl without what the robot does not know (cases.json).
(define (problem heat-milk)
  (:domain kitchen)
  (:objects
    robot1 - robot
    milk - liquid
    microwave fridge - receptacle
    table - surface
    plate sandwich bottle knife - item)
  (:init
    (is-empty-handed robot1)
    (= (lift-capacity robot1) 3)
    (is-microwave microwave)
    (can-support table) (can-support plate)
    (on plate table) (on knife table)
    (in sandwich fridge) (in bottle fridge)
    (liquid-in milk bottle)
    (is-microwave-safe plate) (is-microwave-safe sandwich)
    (= (weight plate) 0.5) (= (weight sandwich) 0.3)
    (= (weight bottle) 1.1) (= (weight knife) 0.1)
    (= (liquid-temperature milk) 4))
  (:goal (and (liquid-heated milk) (exists (?o - item) (and (liquid-in milk ?o) (on ?o table))))))
