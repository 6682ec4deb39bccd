#include "certificates.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>

namespace tessera::core {

namespace {

struct Free {
    void operator()(BIO* p) const { BIO_free(p); }
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
    void operator()(X509* p) const { X509_free(p); }
    void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
    void operator()(BIGNUM* p) const { BN_free(p); }
};
template<typename T> using Owned = std::unique_ptr<T, Free>;

Error failure(const QString& what)
{
    char text[256] = {};
    ERR_error_string_n(ERR_get_error(), text, sizeof text);
    ERR_clear_error();
    return Error { QStringLiteral("certificate"), QStringLiteral("%1: %2").arg(what, QString::fromLatin1(text)) };
}

QByteArray drain(BIO* bio)
{
    char* data = nullptr;
    const long size = BIO_get_mem_data(bio, &data);
    return QByteArray(data, int(size));
}

Owned<BIO> reading(const QByteArray& bytes)
{
    return Owned<BIO>(BIO_new_mem_buf(bytes.constData(), int(bytes.size())));
}

// Adds the extension `nid` with `value` ("CA:TRUE", "DNS:name") to `certificate`, issued by `issuer`.
bool extend(X509* certificate, X509* issuer, int nid, const char* value)
{
    X509V3_CTX context;
    X509V3_set_ctx_nodb(&context);
    X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
    Owned<X509_EXTENSION> extension(X509V3_EXT_conf_nid(nullptr, &context, nid, value));
    return extension && X509_add_ext(certificate, extension.get(), -1) == 1;
}

// A version-3 certificate for `key` named `commonName`, valid from now for `validSeconds`, with a
// random 128-bit serial; not yet signed.
Owned<X509> certificateFor(EVP_PKEY* key, const QString& commonName, std::int64_t validSeconds)
{
    Owned<X509> certificate(X509_new());
    unsigned char serial[16];
    Owned<BIGNUM> number(RAND_bytes(serial, sizeof serial) == 1 ? BN_bin2bn(serial, sizeof serial, nullptr) : nullptr);
    if (!certificate || !number || X509_set_version(certificate.get(), 2) != 1
        || !BN_to_ASN1_INTEGER(number.get(), X509_get_serialNumber(certificate.get()))
        || !X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -60)
        || !X509_gmtime_adj(X509_getm_notAfter(certificate.get()), long(validSeconds))
        || X509_set_pubkey(certificate.get(), key) != 1)
        return nullptr;
    const QByteArray name = commonName.toUtf8();
    X509_NAME* subject = X509_get_subject_name(certificate.get());
    if (X509_NAME_add_entry_by_txt(
            subject, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(name.constData()), int(name.size()), -1, 0)
        != 1)
        return nullptr;
    return certificate;
}

Result<QByteArray> signedPem(X509* certificate, EVP_PKEY* signer)
{
    if (X509_sign(certificate, signer, EVP_sha256()) <= 0)
        return failure(QStringLiteral("cannot sign the certificate"));
    Owned<BIO> out(BIO_new(BIO_s_mem()));
    if (!out || PEM_write_bio_X509(out.get(), certificate) != 1)
        return failure(QStringLiteral("cannot write the certificate"));
    return drain(out.get());
}

Owned<EVP_PKEY> privateKeyOf(const QByteArray& pem)
{
    auto in = reading(pem);
    return Owned<EVP_PKEY>(in ? PEM_read_bio_PrivateKey(in.get(), nullptr, nullptr, nullptr) : nullptr);
}

} // namespace

namespace {

Result<KeyPair> pairOf(EVP_PKEY* key)
{
    Owned<BIO> privateOut(BIO_new(BIO_s_mem()));
    Owned<BIO> publicOut(BIO_new(BIO_s_mem()));
    if (!key || !privateOut || !publicOut
        || PEM_write_bio_PrivateKey(privateOut.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1
        || PEM_write_bio_PUBKEY(publicOut.get(), key) != 1)
        return failure(QStringLiteral("cannot write a P-256 key"));
    return KeyPair { drain(privateOut.get()), drain(publicOut.get()) };
}

} // namespace

Result<KeyPair> KeyPair::generate()
{
    Owned<EVP_PKEY> key(EVP_EC_gen("P-256"));
    if (!key)
        return failure(QStringLiteral("cannot make a P-256 key"));
    return pairOf(key.get());
}

Result<KeyPair> KeyPair::fromPrivatePem(const QByteArray& privatePem)
{
    auto key = privateKeyOf(privatePem);
    if (!key || !EVP_PKEY_is_a(key.get(), "EC"))
        return Error { QStringLiteral("key"), QStringLiteral("not a P-256 private key in PEM") };
    return pairOf(key.get());
}

Result<std::int64_t> certificateExpiry(const QByteArray& certificatePem)
{
    auto in = reading(certificatePem);
    Owned<X509> certificate(in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr);
    std::tm expiry {};
    if (!certificate || ASN1_TIME_to_tm(X509_get0_notAfter(certificate.get()), &expiry) != 1)
        return failure(QStringLiteral("not a certificate"));
    return std::int64_t(timegm(&expiry)) * 1000;
}

Authority::Authority(QByteArray certificate, QByteArray key)
    : m_certificate(std::move(certificate))
    , m_key(std::move(key))
{ }

namespace {

// A new P-256 key and a certificate for it that it signs itself, with `extensions` (nid, value);
// `what` names it in errors ("the authority's certificate").
Result<ServerCertificate> selfSigned(const QString& commonName, std::int64_t validSeconds,
    const QList<std::pair<int, QByteArray>>& extensions, const QString& what)
{
    auto keys = KeyPair::generate();
    if (!keys)
        return keys.error();
    auto key = privateKeyOf(keys->privatePem);
    auto certificate = key ? certificateFor(key.get(), commonName, validSeconds) : nullptr;
    if (!certificate)
        return failure(QStringLiteral("cannot make %1").arg(what));
    X509_set_issuer_name(certificate.get(), X509_get_subject_name(certificate.get()));
    for (const auto& [nid, value] : extensions) {
        if (!extend(certificate.get(), certificate.get(), nid, value.constData()))
            return failure(QStringLiteral("cannot extend %1").arg(what));
    }
    auto pem = signedPem(certificate.get(), key.get());
    if (!pem)
        return pem.error();
    return ServerCertificate { *pem, keys->privatePem };
}

} // namespace

Result<Authority> Authority::create(const QString& commonName, std::int64_t validSeconds)
{
    auto made = selfSigned(commonName, validSeconds,
        { { NID_basic_constraints, "critical,CA:TRUE" }, { NID_key_usage, "critical,keyCertSign,cRLSign" },
            { NID_subject_key_identifier, "hash" } },
        QStringLiteral("the authority's certificate"));
    if (!made)
        return made.error();
    return Authority(made->certificatePem, made->privateKeyPem);
}

Result<Authority> Authority::fromPem(const QByteArray& certificatePem, const QByteArray& privateKeyPem)
{
    auto in = reading(certificatePem);
    Owned<X509> certificate(in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr);
    auto key = privateKeyOf(privateKeyPem);
    if (!certificate || !key)
        return failure(QStringLiteral("not an authority's certificate and key"));
    if (X509_check_private_key(certificate.get(), key.get()) != 1)
        return Error { QStringLiteral("certificate"), QStringLiteral("the key is not the certificate's") };
    return Authority(certificatePem, privateKeyPem);
}

Result<QByteArray> Authority::issue(const QByteArray& publicKeyPem, const QString& name, std::int64_t validSeconds) const
{
    auto in = reading(publicKeyPem);
    Owned<EVP_PKEY> subjectKey(in ? PEM_read_bio_PUBKEY(in.get(), nullptr, nullptr, nullptr) : nullptr);
    if (!subjectKey)
        return failure(QStringLiteral("not a public key"));
    auto certificateIn = reading(m_certificate);
    Owned<X509> authority(certificateIn ? PEM_read_bio_X509(certificateIn.get(), nullptr, nullptr, nullptr) : nullptr);
    auto signer = privateKeyOf(m_key);
    auto certificate = certificateFor(subjectKey.get(), name, validSeconds);
    if (!authority || !signer || !certificate)
        return failure(QStringLiteral("cannot make the certificate"));
    X509_set_issuer_name(certificate.get(), X509_get_subject_name(authority.get()));
    const QByteArray alternative = "DNS:" + name.toUtf8();
    if (!extend(certificate.get(), authority.get(), NID_subject_alt_name, alternative.constData())
        || !extend(certificate.get(), authority.get(), NID_basic_constraints, "critical,CA:FALSE")
        || !extend(certificate.get(), authority.get(), NID_ext_key_usage, "serverAuth,clientAuth"))
        return failure(QStringLiteral("cannot extend the certificate"));
    return signedPem(certificate.get(), signer.get());
}

bool certificateMatchesKey(const QByteArray& certificatePem, const QByteArray& privateKeyPem)
{
    auto in = reading(certificatePem);
    Owned<X509> certificate(in ? PEM_read_bio_X509(in.get(), nullptr, nullptr, nullptr) : nullptr);
    auto key = privateKeyOf(privateKeyPem);
    const bool matches = certificate && key && X509_check_private_key(certificate.get(), key.get()) == 1;
    ERR_clear_error();
    return matches;
}

Result<ServerCertificate> makeServerCertificate(const QString& commonName, const QStringList& altNames, std::int64_t validSeconds)
{
    // What browsers ask of a server's certificate: a leaf (not an authority), for signatures in
    // TLS handshakes, for server authentication, naming its hosts.
    QList<std::pair<int, QByteArray>> extensions { { NID_basic_constraints, "critical,CA:FALSE" },
        { NID_key_usage, "critical,digitalSignature" }, { NID_ext_key_usage, "serverAuth" } };
    if (!altNames.isEmpty())
        extensions.append({ NID_subject_alt_name, altNames.join(u',').toUtf8() });
    return selfSigned(commonName, validSeconds, extensions, QStringLiteral("the server's certificate"));
}

} // namespace tessera::core
