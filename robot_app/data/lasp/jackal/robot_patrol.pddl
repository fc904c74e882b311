; The robot's view of the day's job (patrol.pddl): it does not know parcel masses or its payload.
(define (problem deliver-and-inspect)
  (:domain jackal-jobs)
  (:objects
    jackal - robot
    depot yard site-b site-c - place
    yard-gate - gate
    parcel-1 parcel-2 - parcel)
  (:init
    (at jackal depot)
    (is-dock depot) (is-dock site-b)
    (connected depot yard) (connected yard depot) (connected yard site-b) (connected site-b yard)
    (connected site-b site-c) (connected site-c site-b) (connected depot site-c) (connected site-c depot)
    (gate-on yard-gate yard site-b) (gate-on yard-gate site-b yard)
    (path-clear depot yard) (path-clear yard depot) (path-clear site-b site-c) (path-clear site-c site-b)
    (path-clear depot site-c) (path-clear site-c depot)
    (parcel-at parcel-1 depot) (parcel-at parcel-2 depot)
    (= (battery jackal) 60)
    (= (leg-energy depot yard) 10) (= (leg-energy yard depot) 10)
    (= (leg-energy yard site-b) 15) (= (leg-energy site-b yard) 15)
    (= (leg-energy site-b site-c) 20) (= (leg-energy site-c site-b) 20)
    (= (leg-energy depot site-c) 30) (= (leg-energy site-c depot) 30))
  (:goal (and (parcel-at parcel-1 site-b) (parcel-at parcel-2 site-b) (inspected site-c)
              (at jackal depot))))
