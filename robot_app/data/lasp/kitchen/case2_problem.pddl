; Robot's problem for LASP case 2: env1_store_fruit.pddl without what the robot does not know (cases.json).
(define (problem store-fruit)
  (:domain kitchen)
  (:objects
    robot1 - robot
    water - liquid
    microwave fridge - receptacle
    table - surface
    glove cup plate apple watermelon egg beef - item)
  (:init
    (holding robot1 apple)
    (= (lift-capacity robot1) 3) (= (tolerance-temperature robot1) 45)
    (is-microwave microwave)
    (can-support table) (can-support plate)
    (on glove table) (on cup table) (on plate table) (on watermelon table)
    (in egg fridge) (in beef fridge)
    (liquid-in water cup)
    (is-heat-insulation glove) (is-fruit apple) (is-fruit watermelon)
    (is-microwave-safe cup) (is-microwave-safe plate) (is-microwave-safe egg) (is-microwave-safe beef)
    (can-contain-liquid cup)
    (= (weight glove) 0.1) (= (weight cup) 0.3) (= (weight plate) 0.5) (= (weight apple) 0.2)
    (= (weight watermelon) 6) (= (weight egg) 0.06) (= (weight beef) 1)
    (= (temperature glove) 20) (= (temperature cup) 20) (= (temperature plate) 20)
    (= (temperature apple) 20) (= (temperature watermelon) 20) (= (temperature egg) 4)
    (= (temperature beef) 4) (= (liquid-temperature water) 20))
  (:goal (and (in apple fridge) (not (is-open fridge)))))
