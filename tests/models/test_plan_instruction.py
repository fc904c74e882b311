"""`robot-app plan --instruction` end to end: rules parser -> tiny CLIP export -> map embeddings -> walk."""

from __future__ import annotations

import json
import shutil

from robot_app.cli import main
from robot_app.mapping.synthetic_logs import write_synthetic_log


def test_plan_from_an_instruction_with_clip(tmp_path, clip_export_dir, capsys):
    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    write_synthetic_log(tmp_path / "log", [(0, 0), (40, 0), (40, 40)], seed=4)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n[llm]\nlandmark_parser = "rules"\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map"),
                 "--json"]) == 0
    capsys.readouterr()
    assert main(["--config", str(conf), "map", "info", str(tmp_path / "m.map"), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert len(info["embedding_models"]) == 1 and info["embedding_models"][0].startswith("clip:")
    rc = main(["--config", str(conf), "plan", "--map", str(tmp_path / "m.map"), "--start", "0", "--json",
               "--instruction", "Go past the red house, then stop at the blue car."])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["status"] == "ok"
    assert [lm["name"] for lm in out["landmarks"]] == [g["name"] for g in out["grounding"]["landmarks"]]
    assert len(out["landmarks"]) == 2 and out["grounding"]["parser"] == "rules"
    for g in out["grounding"]["landmarks"]:
        assert len(g["top_nodes"]) == 3 and -1.0 <= g["best_cosine"] <= 1.0


def test_map_build_embeds_crops_of_the_rectified_frame(tmp_path, clip_export_dir, capsys):
    from core.mapstore import open_map

    models = tmp_path / "models"
    shutil.copytree(clip_export_dir, models)
    write_synthetic_log(tmp_path / "log", [(0, 0), (20, 0)], seed=4)
    conf = tmp_path / "c.toml"
    conf.write_text(f'[paths]\nmodels_dir = "{models}"\n[camera]\nclip_crops = 3\n'
                    'fisheye_k = [20.0, 20.0, 16.0, 12.0]\nfisheye_d = [0.05, 0.0, 0.0, 0.0]\n')
    assert main(["--config", str(conf), "map", "build", str(tmp_path / "log"), "--out", str(tmp_path / "m.map")]) == 0
    with open_map(tmp_path / "m.map") as m:
        n = len(m.nodes)
        emb, node = m.embeddings(m.embedding_models()[0])
        assert emb.shape[0] == 3 * n and sorted(set(node.tolist())) == list(range(n))
        assert len(m.images(0)) == 4 and m.images(0)[0] != m.images(0)[1]  # raw frame first, then 3 crops
