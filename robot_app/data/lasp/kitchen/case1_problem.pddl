; Robot's problem for LASP case 1: env1_serve_fruit.pddl without what the robot does not know (cases.json).
(define (problem serve-fruit)
  (:domain kitchen)
  (:objects
    robot1 - robot
    water - liquid
    microwave fridge - receptacle
    table - surface
    glove cup plate watermelon egg beef - item)
  (:init
    (is-empty-handed robot1)
    (= (tolerance-temperature robot1) 45)
    (is-microwave microwave)
    (can-support table) (can-support plate)
    (on glove table) (on cup table) (on plate table) (on watermelon table)
    (in egg fridge) (in beef fridge)
    (liquid-in water cup)
    (is-heat-insulation glove) (is-fruit watermelon)
    (is-microwave-safe cup) (is-microwave-safe plate) (is-microwave-safe egg) (is-microwave-safe beef)
    (can-contain-liquid cup)
    (= (temperature glove) 20) (= (temperature cup) 20) (= (temperature plate) 20)
    (= (temperature watermelon) 20) (= (temperature egg) 4)
    (= (temperature beef) 4) (= (liquid-temperature water) 20))
  (:goal (exists (?f - item) (and (is-fruit ?f) (on ?f plate)))))
