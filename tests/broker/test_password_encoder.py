"""Password-type dynamic configs encrypted as Kafka's PasswordEncoder encrypts them."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from broker.security.password_encoder import (
    CBC,
    GCM,
    NO_SECRET,
    NOT_PER_BROKER,
    DynamicPasswords,
    PasswordDecodeError,
    PasswordEncoder,
    is_password_config,
)
from config import ConfigError, build_config


def _fields(encoded: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in encoded.split(","))


@pytest.mark.parametrize("cipher", [CBC, GCM])
@pytest.mark.parametrize("factory", ["PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA1"])
def test_encode_decode_roundtrip(cipher: str, factory: str) -> None:
    encoder = PasswordEncoder("the-secret", cipher, 256, factory, 1024)
    encoded = encoder.encode("pässwörd,with:separators")
    assert "pässwörd" not in encoded
    fields = _fields(encoded)
    assert fields["cipherAlgorithm"] == cipher and fields["keyFactoryAlgorithm"] == factory
    assert fields["keyLength"] == "256" and fields["iterations"] == "1024"
    assert len(base64.b64decode(fields["salt"])) == 256
    assert fields["passwordLength"] == str(len("pässwörd,with:separators"))
    assert ("authenticationTagLength" in fields) == (cipher == GCM)
    assert encoder.decode(encoded) == "pässwörd,with:separators"
    # Another encoder with the same secret decodes it: the parameters travel with the value.
    assert PasswordEncoder("the-secret").decode(encoded) == "pässwörd,with:separators"
    assert encoder.encode("x") != encoder.encode("x"), "a fresh salt and IV each time"


def test_wrong_secret_and_garbage_do_not_decode() -> None:
    encoded = PasswordEncoder("right").encode("p12-password")
    for encoder in (PasswordEncoder("wrong"), PasswordEncoder("wrong", GCM)):
        with pytest.raises(PasswordDecodeError):
            encoder.decode(encoded)
    for bad in ("p12-password", "a:b", encoded.replace("iterations:4096", "iterations:0"), ""):
        with pytest.raises(PasswordDecodeError):
            PasswordEncoder("right").decode(bad)


def test_unsupported_parameters_are_config_errors() -> None:
    for kwargs, key in (({"cipher_algorithm": "DES/ECB/NoPadding"}, "password.encoder.cipher.algorithm"),
                        ({"key_factory": "PBKDF2WithHmacMD5"}, "password.encoder.keyfactory.algorithm"),
                        ({"key_length": 100}, "password.encoder.key.length")):
        with pytest.raises(ConfigError) as refused:
            PasswordEncoder("s", **kwargs)  # type: ignore[arg-type]
        assert refused.value.key == key


def test_password_configs_by_name() -> None:
    for name in ("listener.name.ssl.ssl.keystore.password", "listener.name.sasl_ssl.plain.sasl.jaas.config",
                 "listener.name.x.ssl.keystore.key", "ssl.truststore.certificates"):
        assert is_password_config(name)
    for name in ("listener.name.ssl.ssl.keystore.location", "log.retention.ms", "password.encoder.secret"):
        assert not is_password_config(name)


def test_dynamic_passwords_from_the_broker_config() -> None:
    config, _ = build_config({"password.encoder.secret": "s3cret", "password.encoder.old.secret": "old",
                              "password.encoder.cipher.algorithm": GCM, "password.encoder.iterations": "2048"})
    passwords = DynamicPasswords.from_config(config)
    changes = {"listener.name.ssl.ssl.keystore.password": "p", "listener.name.ssl.ssl.keystore.location": "/k.p12",
               "listener.name.ssl.ssl.key.password": None}
    stored = passwords.encode_changes(changes, per_broker=True)
    assert stored["listener.name.ssl.ssl.keystore.location"] == "/k.p12"
    assert stored["listener.name.ssl.ssl.key.password"] is None
    encoded = stored["listener.name.ssl.ssl.keystore.password"]
    assert encoded is not None and _fields(encoded)["cipherAlgorithm"] == GCM
    assert _fields(encoded)["iterations"] == "2048"
    # Values the old secret encrypted still decode while the secret is rotated; others are dropped.
    by_old = PasswordEncoder("old").encode("older")
    by_other = PasswordEncoder("someone-else").encode("lost")
    assert passwords.decoded({"listener.name.a.ssl.keystore.password": encoded,
                              "listener.name.b.ssl.keystore.password": by_old,
                              "listener.name.c.ssl.keystore.password": by_other,
                              "listener.name.a.ssl.keystore.location": "/k.p12"}) == {
        "listener.name.a.ssl.keystore.password": "p", "listener.name.b.ssl.keystore.password": "older",
        "listener.name.a.ssl.keystore.location": "/k.p12"}
    with pytest.raises(ConfigError, match=NOT_PER_BROKER):
        passwords.encode_changes({"listener.name.ssl.ssl.keystore.password": "p"}, per_broker=False)


def test_rotation_reencodes_what_only_the_old_secret_decodes() -> None:
    new, old = PasswordEncoder("new"), PasswordEncoder("old")
    passwords = DynamicPasswords(new, old)
    stored = {"listener.name.a.ssl.keystore.password": old.encode("by-old"),
              "listener.name.b.ssl.keystore.password": new.encode("by-new"),
              "listener.name.c.ssl.keystore.password": PasswordEncoder("lost").encode("x"),
              "listener.name.a.ssl.keystore.location": "/k.p12"}
    changes = passwords.reencoded(stored)
    assert list(changes) == ["listener.name.a.ssl.keystore.password"]
    value = changes["listener.name.a.ssl.keystore.password"]
    assert value is not None and new.decode(value) == "by-old"
    assert DynamicPasswords(new).reencoded(stored) == {}, "nothing to do without an old secret"


def test_without_a_secret_passwords_are_refused() -> None:
    config, _ = build_config({})
    passwords = DynamicPasswords.from_config(config)
    assert passwords.encoder is None
    with pytest.raises(ConfigError, match=NO_SECRET):
        passwords.encode_changes({"listener.name.ssl.ssl.keystore.password": "p"}, per_broker=True)
    assert passwords.encode_changes({"log.retention.ms": "1000", "listener.name.ssl.ssl.key.password": None},
                                    per_broker=True) == {"log.retention.ms": "1000",
                                                         "listener.name.ssl.ssl.key.password": None}


JAVA_DECODER = """
import javax.crypto.Cipher; import javax.crypto.SecretKeyFactory; import javax.crypto.spec.*;
import java.nio.charset.StandardCharsets; import java.util.*;
public class Decode {  // what Kafka's PasswordEncoder.decode does with the JCE
  public static void main(String[] args) throws Exception {
    Map<String, String> m = new HashMap<>();
    for (String kv : args[1].split(",")) { int i = kv.indexOf(':'); m.put(kv.substring(0, i), kv.substring(i + 1)); }
    Base64.Decoder b64 = Base64.getDecoder();
    PBEKeySpec spec = new PBEKeySpec(args[0].toCharArray(), b64.decode(m.get("salt")),
        Integer.parseInt(m.get("iterations")), Integer.parseInt(m.get("keyLength")));
    SecretKeySpec key = new SecretKeySpec(
        SecretKeyFactory.getInstance(m.get("keyFactoryAlgorithm")).generateSecret(spec).getEncoded(), "AES");
    String algorithm = m.get("cipherAlgorithm");
    Cipher cipher = Cipher.getInstance(algorithm);
    byte[] iv = b64.decode(m.get("initializationVector"));
    if (algorithm.contains("GCM"))
      cipher.init(Cipher.DECRYPT_MODE, key, new GCMParameterSpec(Integer.parseInt(m.get("authenticationTagLength")), iv));
    else cipher.init(Cipher.DECRYPT_MODE, key, new IvParameterSpec(iv));
    System.out.print(new String(cipher.doFinal(b64.decode(m.get("encryptedPassword"))), StandardCharsets.UTF_8));
  }
}
"""


def test_java_jce_decodes_what_we_encode(tmp_path: Path) -> None:
    """The JCE (as Kafka's PasswordEncoder uses it) decrypts our values: same key derivation,
    padding, IV and GCM tag layout."""
    import shutil
    import subprocess

    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (scripts/install_test_deps.sh installs one)")
    (tmp_path / "Decode.java").write_text(JAVA_DECODER)
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Decode.java")], check=True, timeout=120)
    for cipher, factory, bits in ((CBC, "PBKDF2WithHmacSHA512", 128), (GCM, "PBKDF2WithHmacSHA256", 256)):
        encoded = PasswordEncoder("sécret", cipher, bits, factory, 1024).encode("pässword-1")
        decoded = subprocess.run(["java", "-cp", str(tmp_path), "Decode", "sécret", encoded], capture_output=True,
                                 check=True, timeout=120).stdout.decode()
        assert decoded == "pässword-1", (cipher, decoded)
