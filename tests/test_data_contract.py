"""The model-data contract: the data states what the objective needs once, as a ``DataContract``; objectives read
``self.data``, not the data module's attributes by name."""

import re
from pathlib import Path

import lightning as L
import pytest

from plm_lightning.data import BARTDataModule, MaskedLMDataModule
from plm_lightning.data_contract import NO_CONTRACT, DataContract, read_contract
from plm_lightning.errors import ConfigError
from plm_lightning.objectives import ERNIE2, CausalLM, Seq2SeqLM

OBJECTIVES = Path(__file__).resolve().parent.parent / "plm_lightning" / "objectives"
WORD_LEVEL = {"cove.py", "static_embeddings.py"}
"""Word-level models take their vocabulary object from the data module's ``setup`` (no tokenizer, no contract)."""


def test_a_text_data_module_states_its_tokenizer_block_and_packing_and_bart_its_longer_inputs():
    data = MaskedLMDataModule(seq_len=32, packing="sentence_pairs")
    contract = read_contract(data)
    assert contract.tokenizer is data.tokenizer and contract.seq_len == contract.longest_input == 32
    assert contract.packing == "sentence_pairs" and contract.decoder_only is None and contract.entity_embeddings is None
    bart = read_contract(BARTDataModule(seq_len=32))
    assert bart.decoder_start_token == "eos" and bart.max_input_length > 32 and bart.longest_input > 32


def test_data_modules_without_a_contract_state_nothing_and_a_wrong_one_is_refused():
    assert read_contract(L.LightningDataModule()) is NO_CONTRACT and read_contract(None) is NO_CONTRACT

    class Wrong(L.LightningDataModule):
        def contract(self) -> dict:
            return {"seq_len": 8}

    with pytest.raises(TypeError, match="not a DataContract"):
        read_contract(Wrong())


def test_objectives_check_the_contract_before_they_build():
    ernie2 = ERNIE2(backbone="tiny", max_reorder_segments=4)
    with pytest.raises(ConfigError, match="model.max_reorder_segments=4 differs from data.max_reorder_segments=3"):
        ernie2.check_data(DataContract(max_reorder_segments=3))
    ernie2.check_data(NO_CONTRACT)  # nothing stated: the model's setting stands
    t5 = Seq2SeqLM(backbone="tiny-t5")
    with pytest.raises(ConfigError, match="data.decoder_only=true makes prefix-LM rows"):
        t5.check_data(DataContract(decoder_only=True))
    with pytest.raises(ConfigError, match="model.decoder_start_token='pad' but the data starts the decoder from 'eos'"):
        t5.check_data(DataContract(decoder_start_token="eos"))
    with pytest.raises(ConfigError, match=r"makes \(input, target\) rows for an encoder-decoder"):
        CausalLM(backbone="tiny-gpt").check_data(DataContract(decoder_only=False))
    CausalLM(backbone="tiny-gpt").check_data(DataContract(decoder_only=True))


def test_no_objective_reads_the_data_module_by_name():
    """Only ``base.py`` reads the contract from the trainer's data module; a ``getattr(datamodule, ...)`` anywhere
    else in ``objectives/`` is the debt this contract removed."""
    readers = {p.name for p in OBJECTIVES.glob("*.py") if re.search(r"\bdatamodule\b", p.read_text())}
    assert readers - WORD_LEVEL == {"base.py"}, readers
    assert "read_contract" in (OBJECTIVES / "base.py").read_text()
